import {
  claimSql,
  giveBackSql,
  isRetryable,
  leaseExpired,
  Loops,
  renewSql,
  retryOn,
  RETRYABLE_SQLSTATES,
  sqlstateOf,
  sweepSql,
  type JobTable,
} from "../../lib/jobs/jobs";

const oneLine = (sql: string) => sql.replace(/\s+/g, " ").replace(/\( /g, "(").replace(/ \)/g, ")").trim();

const leased: JobTable = { table: "jobs", alias: "j", key: "id", keyType: "uuid", owner: "node_id", lease: { until: "leased_until" } };
const beating: JobTable = {
  table: "imports",
  alias: "i",
  key: "id",
  keyType: "uuid",
  owner: "node_id",
  lease: { heartbeat: "heartbeat_at", staleAfterS: 120 },
  keepHolder: true,
};

describe("claimSql", () => {
  it("locks the candidates with SKIP LOCKED and sets the holder and the lease in the same statement", () => {
    const sql = claimSql(leased, {
      candidates: { where: "j.status = 'QUEUED'", orderBy: "j.created_at, j.id", limit: 1 },
      owner: "$1",
      leaseMs: "$2",
      set: "status = 'PROCESSING'",
      returning: "j.id",
    });
    expect(oneLine(sql)).toBe(
      "WITH next AS (SELECT j.id FROM jobs j WHERE j.status = 'QUEUED' ORDER BY j.created_at, j.id LIMIT 1 FOR UPDATE SKIP LOCKED) " +
        "UPDATE jobs j SET node_id = $1, leased_until = now() + make_interval(secs => $2::float8 / 1000), status = 'PROCESSING' " +
        "FROM next WHERE j.id = next.id RETURNING j.id",
    );
  });

  it("takes a candidate query of the caller's under its name", () => {
    const sql = claimSql(leased, {
      as: "c",
      candidates: "SELECT x.id, x.url FROM x FOR UPDATE SKIP LOCKED",
      owner: "$5",
      leaseMs: "$4",
      returning: "j.id, c.url",
    });
    expect(oneLine(sql)).toBe(
      "WITH c AS (SELECT x.id, x.url FROM x FOR UPDATE SKIP LOCKED) UPDATE jobs j SET node_id = $5, leased_until = now() + make_interval(secs => $4::float8 / 1000) " +
        "FROM c WHERE j.id = c.id RETURNING j.id, c.url",
    );
  });

  it("matches the rest of the key too when the candidates yield it (matchAlso: a unique probe of a two-column key)", () => {
    const sql = claimSql(leased, {
      as: "c",
      matchAlso: "company_id",
      candidates: "SELECT x.id, x.company_id FROM x FOR UPDATE SKIP LOCKED",
      owner: "$1",
      leaseMs: "$2",
      returning: "j.id",
    });
    expect(oneLine(sql)).toContain("FROM c WHERE j.id = c.id AND j.company_id = c.company_id RETURNING j.id");
  });

  it("refuses a candidate query that does not skip locked rows, and a lease without its length", () => {
    expect(() => claimSql(leased, { candidates: "SELECT id FROM jobs FOR UPDATE", owner: "$1", leaseMs: "$2", returning: "j.id" })).toThrow(/SKIP LOCKED/);
    expect(() => claimSql(leased, { candidates: { where: "true", orderBy: "j.id", limit: 1 }, owner: "$1", returning: "j.id" })).toThrow(/leaseMs/);
  });

  it("takes a heartbeat lease as now()", () => {
    const sql = claimSql(beating, { candidates: { where: "true", orderBy: "i.id", limit: 5 }, owner: "$1", returning: "i.id" });
    expect(oneLine(sql)).toContain("SET node_id = $1, heartbeat_at = now() FROM next");
  });
});

describe("lease statements", () => {
  it("judges a lease gone by its end, or by a heartbeat older than the stale time", () => {
    expect(leaseExpired(leased)).toBe("j.leased_until < now()");
    expect(leaseExpired(beating)).toBe("i.heartbeat_at < now() - make_interval(secs => 120)");
  });

  it("renews the leases of one holder's rows and answers which are still its own", () => {
    const s = renewSql(leased, { ids: ["a", "b"], owner: "n1" }, { leaseMs: 3000, where: "j.status = 'PROCESSING'", returning: "j.id, j.run" });
    expect(oneLine(s.sql)).toBe(
      "UPDATE jobs j SET leased_until = now() + make_interval(secs => $1::float8 / 1000) WHERE (j.id = ANY ($2::uuid[]) AND j.node_id = $3) AND (j.status = 'PROCESSING') RETURNING j.id, j.run",
    );
    expect(s.params).toEqual([3000, ["a", "b"], "n1"]);
  });

  it("renews heartbeats of rows whoever holds them", () => {
    const s = renewSql(beating, { ids: ["a"], owner: null });
    expect(oneLine(s.sql)).toBe("UPDATE imports i SET heartbeat_at = now() WHERE (i.id = ANY ($1::uuid[])) RETURNING i.id");
    expect(s.params).toEqual([["a"]]);
  });

  it("gives rows back clearing holder and lease, with what the caller sets, each row with its own holder", () => {
    const s = giveBackSql({ ...leased, keyType: "bigint", owner: "claim_token" }, { each: [{ id: "7", owner: "tok" }] }, {});
    expect(oneLine(s.sql)).toBe(
      "UPDATE jobs j SET claim_token = NULL, leased_until = NULL FROM jsonb_to_recordset($1::jsonb) AS held(id bigint, owner text) " +
        "WHERE (j.id = held.id AND j.claim_token = held.owner) RETURNING j.id",
    );
    expect(JSON.parse(s.params[0] as string)).toEqual([{ id: "7", owner: "tok" }]);
  });

  it("numbers the caller's parameters first, and keeps the holder of a table that keeps it", () => {
    const s = giveBackSql(beating, { ids: ["a"], owner: null }, { set: "status = 'FAILED', failure = $1", where: "i.status = 'PROCESSING'", params: ["why"] });
    expect(oneLine(s.sql)).toBe(
      "UPDATE imports i SET status = 'FAILED', failure = $1 WHERE (i.id = ANY ($2::uuid[])) AND (i.status = 'PROCESSING') RETURNING i.id",
    );
    expect(s.params).toEqual(["why", ["a"]]);
    expect(() => giveBackSql(beating, { ids: ["a"], owner: null }, {})).toThrow(/must set something/);
  });

  it("reaches the rows of a table keyed by two columns by both: the claim matches both, held rows name their group", () => {
    const grouped: JobTable = { ...leased, table: "recipients", alias: "r", key: "contact_id", group: { column: "campaign_id", type: "uuid" } };
    const claim = claimSql(grouped, {
      candidates: "SELECT r.campaign_id, r.contact_id FROM recipients r FOR UPDATE OF r SKIP LOCKED",
      owner: "$1",
      leaseMs: "$2",
      returning: "r.contact_id",
    });
    expect(oneLine(claim)).toContain("FROM next WHERE r.contact_id = next.contact_id AND r.campaign_id = next.campaign_id RETURNING");
    const s = renewSql(grouped, { group: "c1", ids: ["a"], owner: "tok" }, { leaseMs: 10 });
    expect(oneLine(s.sql)).toBe(
      "UPDATE recipients r SET leased_until = now() + make_interval(secs => $1::float8 / 1000) WHERE (r.campaign_id = $2::uuid AND r.contact_id = ANY ($3::uuid[]) AND r.node_id = $4) RETURNING r.contact_id",
    );
    expect(s.params).toEqual([10, "c1", ["a"], "tok"]);
    expect(() => renewSql(grouped, { ids: ["a"], owner: "tok" }, { leaseMs: 10 })).toThrow(/group/);
    expect(() => renewSql(leased, { group: "c1", ids: ["a"], owner: "tok" }, { leaseMs: 10 })).toThrow(/group/);
  });

  it("sweeps the rows whose lease is gone", () => {
    const s = sweepSql(leased, { set: "status = 'FAILED'", where: "j.attempts >= 3" });
    expect(oneLine(s.sql)).toBe(
      "UPDATE jobs j SET node_id = NULL, leased_until = NULL, status = 'FAILED' WHERE (j.attempts >= 3) AND (j.leased_until < now()) RETURNING j.id",
    );
  });
});

describe("retryable SQLSTATEs", () => {
  const pgError = (code: string) => Object.assign(new Error("x"), { code });
  const sequelizeError = (code: string, name = "SequelizeDatabaseError") => Object.assign(new Error("x"), { name, original: { code }, parent: { code } });

  it("reads the SQLSTATE of pg's errors and of Sequelize's wrappers", () => {
    expect(sqlstateOf(pgError("40P01"))).toBe("40P01");
    expect(sqlstateOf(sequelizeError("40001"))).toBe("40001");
    expect(sqlstateOf(Object.assign(new Error("x"), { code: "ECONNRESET" }))).toBeUndefined();
    expect(sqlstateOf(undefined)).toBeUndefined();
  });

  it("retries deadlocks, serialization failures and unique keys taken meanwhile, nothing else", () => {
    expect(RETRYABLE_SQLSTATES).toEqual(["40P01", "40001", "23505"]);
    for (const code of ["40P01", "40001", "23505"]) {
      expect(isRetryable(pgError(code))).toBe(true);
      expect(isRetryable(sequelizeError(code))).toBe(true);
    }
    expect(isRetryable(sequelizeError("23505", "SequelizeUniqueConstraintError"))).toBe(true);
    expect(isRetryable(Object.assign(new Error("x"), { name: "SequelizeUniqueConstraintError" }))).toBe(true);
    expect(isRetryable(pgError("23503"))).toBe(false);
    expect(isRetryable(pgError("23505"), ["40P01"])).toBe(false);
    expect(isRetryable(new Error("boom"))).toBe(false);
  });

  it("runs again up to the attempts allowed, then throws the last error", async () => {
    let runs = 0;
    await expect(
      retryOn(RETRYABLE_SQLSTATES, 3, async () => {
        runs++;
        throw pgError("40P01");
      }),
    ).rejects.toMatchObject({ code: "40P01" });
    expect(runs).toBe(3);
    runs = 0;
    await expect(
      retryOn(RETRYABLE_SQLSTATES, 3, async () => {
        runs++;
        throw pgError("23503");
      }),
    ).rejects.toMatchObject({ code: "23503" });
    expect(runs).toBe(1);
    const marker = new Error("race");
    expect(await retryOn(RETRYABLE_SQLSTATES, 3, async (n) => (n < 3 ? Promise.reject(marker) : n), { also: (e) => e === marker, delayMs: () => 1 })).toBe(3);
  });
});

describe("Loops", () => {
  it("runs at once when asked, logs a failure with what failed, and stops", async () => {
    const warnings: string[] = [];
    const loops = new Loops({ warn: (_o, m) => warnings.push(m) });
    let runs = 0;
    loops.every(
      10,
      "tick",
      async () => {
        runs++;
        throw new Error("no");
      },
      { runNow: true },
    );
    expect(runs).toBe(1);
    await new Promise((r) => setTimeout(r, 35));
    loops.stop();
    const seen = runs;
    expect(seen).toBeGreaterThanOrEqual(2);
    expect(warnings[0]).toBe("tick failed");
    await new Promise((r) => setTimeout(r, 30));
    expect(runs).toBe(seen);
  });
});
