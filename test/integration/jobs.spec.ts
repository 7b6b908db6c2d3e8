/**
 * lib/jobs/jobs.ts on a real database (embedded PGlite, or the PostgreSQL at TEST_DATABASE_URL): claims
 * never hand one row to two holders, renewal answers what is still held, giving back and sweeping
 * end holds as the caller says. That a claim skips a row another transaction has locked needs two
 * sessions: PostgreSQL only.
 */
import pg from "pg";
import { QueryTypes } from "sequelize";
import { Jobs, leaseExpired, type ClaimSpec, type JobTable } from "../../lib/jobs/jobs";
import { createTestDatabase, itWithPostgres, type TestDatabase } from "../helpers/db";

const PROBES: JobTable = { table: "job_probes", alias: "j", key: "id", keyType: "bigint", owner: "node_id", lease: { until: "leased_until" } };
const BEATS: JobTable = {
  table: "job_beats",
  alias: "b",
  key: "id",
  keyType: "bigint",
  owner: "node_id",
  lease: { heartbeat: "heartbeat_at", staleAfterS: 60 },
  keepHolder: true,
};

/** $1: the claimant, $2: the lease (ms), $3: how many. */
const CLAIM: ClaimSpec = {
  candidates: { where: `j.status = 'QUEUED' OR (j.status = 'PROCESSING' AND ${leaseExpired(PROBES)})`, orderBy: "j.id", limit: "$3" },
  owner: "$1",
  leaseMs: "$2",
  set: "status = 'PROCESSING', attempts = j.attempts + 1",
  returning: "j.id, j.attempts",
};

let tdb: TestDatabase;
let probes: Jobs;
let beats: Jobs;

beforeAll(async () => {
  tdb = await createTestDatabase();
  await tdb.db.sequelize.query(`
    CREATE TABLE job_probes (id bigint PRIMARY KEY, status text NOT NULL DEFAULT 'QUEUED', node_id text, leased_until timestamptz, attempts integer NOT NULL DEFAULT 0);
    CREATE TABLE job_beats (id bigint PRIMARY KEY, status text NOT NULL DEFAULT 'PROCESSING', node_id text, heartbeat_at timestamptz NOT NULL DEFAULT now(), failure text)`);
  probes = new Jobs(tdb.db.sequelize, PROBES, CLAIM);
  beats = new Jobs(tdb.db.sequelize, BEATS);
});
afterAll(() => tdb?.drop());

beforeEach(async () => {
  await tdb.db.sequelize.query(`TRUNCATE job_probes, job_beats; INSERT INTO job_probes (id) SELECT generate_series(1, 6)`);
});

const rows = (table: string) =>
  tdb.db.sequelize.query<{ id: string; status: string; node_id: string | null; leased: boolean; attempts: number }>(
    `SELECT id::text, status, node_id, leased_until IS NOT NULL AS leased, attempts FROM ${table} ORDER BY id`,
    { type: QueryTypes.SELECT },
  );

const claim = (node: string, n: number, leaseMs = 60_000) => probes.claim<{ id: string; attempts: number }>([node, leaseMs, n]);
const ids = (list: { id: string | number }[]) => list.map((r) => Number(r.id)).sort((a, b) => a - b);

it("hands each row to one claimant, in order, with its holder and lease set", async () => {
  const [a, b] = await Promise.all([claim("a", 2), claim("b", 2)]);
  expect([...ids(a), ...ids(b)].sort()).toEqual([1, 2, 3, 4]);
  expect(ids(await claim("c", 10))).toEqual([5, 6]);
  expect(await claim("d", 10)).toEqual([]);
  const held = await rows("job_probes");
  expect(held.every((r) => r.status === "PROCESSING" && r.leased && r.attempts === 1)).toBe(true);
  expect(held.filter((r) => r.node_id === "c").map((r) => Number(r.id))).toEqual([5, 6]);
});

it("renews only the holder's own rows and answers which they are", async () => {
  const mine = await claim("a", 2);
  await claim("b", 2);
  const renewed = await probes.renew({ ids: [1, 2, 3], owner: "a" }, { leaseMs: 60_000, where: "j.status = 'PROCESSING'" });
  expect(ids(renewed)).toEqual(ids(mine));
  expect(await probes.renew({ ids: [], owner: "a" }, { leaseMs: 60_000 })).toEqual([]);
});

it("gives rows back as the caller says, by one holder or each row with its own", async () => {
  await claim("a", 2);
  await claim("b", 2);
  expect(await probes.giveBack({ ids: [1, 2, 3], owner: "a" }, { set: "status = 'QUEUED', attempts = greatest(j.attempts - 1, 0)" })).toBe(2);
  expect(
    await probes.giveBack(
      {
        each: [
          { id: 3, owner: "b" },
          { id: 4, owner: "not-b" },
        ],
      },
      { set: "status = 'QUEUED'" },
    ),
  ).toBe(1);
  expect((await rows("job_probes")).slice(0, 4)).toEqual([
    { id: "1", status: "QUEUED", node_id: null, leased: false, attempts: 0 },
    { id: "2", status: "QUEUED", node_id: null, leased: false, attempts: 0 },
    { id: "3", status: "QUEUED", node_id: null, leased: false, attempts: 1 },
    { id: "4", status: "PROCESSING", node_id: "b", leased: true, attempts: 1 },
  ]);
  // Given back, a row is claimed again at once.
  expect(ids(await claim("c", 3))).toEqual([1, 2, 3]);
});

it("takes over a row whose lease ran out, and sweeps what the caller says is dead", async () => {
  await claim("a", 6, 1);
  await new Promise((r) => setTimeout(r, 20));
  expect(await probes.renew({ ids: [1], owner: "other" }, { leaseMs: 60_000 })).toEqual([]);
  // The lease ran out: another claimant takes the rows over (a second attempt).
  expect((await claim("b", 2, 1)).map((r) => r.attempts)).toEqual([2, 2]);
  await new Promise((r) => setTimeout(r, 20));
  expect(await probes.sweep({ set: "status = 'FAILED'", where: "j.attempts >= 2" })).toBe(2);
  const after = await rows("job_probes");
  expect(after.filter((r) => r.status === "FAILED")).toEqual([
    { id: "1", status: "FAILED", node_id: null, leased: false, attempts: 2 },
    { id: "2", status: "FAILED", node_id: null, leased: false, attempts: 2 },
  ]);
  expect(after.filter((r) => r.status === "PROCESSING")).toHaveLength(4);
});

it("keeps heartbeat holds alive by renewal and ends the silent ones, leaving who held them", async () => {
  await tdb.db.sequelize.query(
    `INSERT INTO job_beats (id, node_id, heartbeat_at) VALUES (1, 'a', now() - interval '10 minutes'), (2, 'b', now() - interval '10 minutes')`,
  );
  expect(ids(await beats.renew({ ids: [2], owner: null }))).toEqual([2]);
  expect(await beats.sweep({ set: "status = 'FAILED', failure = $1", where: "b.status = 'PROCESSING'", params: ["silent"] })).toBe(1);
  expect(
    await beats.giveBack({ ids: [2], owner: null }, { set: "status = 'FAILED', failure = $1", where: "b.status = 'PROCESSING'", params: ["stopped"] }),
  ).toBe(1);
  const out = await tdb.db.sequelize.query(`SELECT id::int, status, node_id, failure FROM job_beats ORDER BY id`, { type: QueryTypes.SELECT });
  expect(out).toEqual([
    { id: 1, status: "FAILED", node_id: "a", failure: "silent" },
    { id: 2, status: "FAILED", node_id: "b", failure: "stopped" },
  ]);
});

itWithPostgres("skips a row another transaction holds locked instead of waiting for it", async () => {
  const other = new pg.Client({ connectionString: tdb.url! });
  await other.connect();
  try {
    await other.query("BEGIN");
    await other.query("SELECT id FROM job_probes WHERE id = 1 FOR UPDATE");
    expect(ids(await claim("a", 2))).toEqual([2, 3]);
    await other.query("ROLLBACK");
    expect(ids(await claim("b", 1))).toEqual([1]);
  } finally {
    await other.end();
  }
});
