/**
 * Rotating SECRETS_KEY (docs/security.md "Rotating SECRETS_KEY"): tokens written under the old key, the
 * nodes rolled to SECRETS_KEY=new + SECRETS_KEY_PREVIOUS=old, then a real `npm run admin --
 * secrets:rotate` process (embedded DATA_DIR with the service running, and DATABASE_URL) re-seals
 * every token; afterwards a service holding only the new key reads them all, and the rows' key ids
 * changed. A token no configured key opens makes the command exit 1 naming its id, never a token;
 * a token given while the rotation holds its batch is never overwritten with the old one.
 */
import { randomBytes } from "node:crypto";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { QueryTypes, type Sequelize } from "sequelize";
import { API_PREFIX } from "../../lib/http/api";
import { startApp, type App } from "../../app/start-app";
import { createKeyAsAdmin } from "../../services/auth/auth.contract";
import { rotateSecrets } from "../../services/profiles/profiles.contract";
import { rotateTokens } from "../../services/profiles/profiles.rotate";
import { keyIdOf, SecretBox } from "../../lib/security/secrets";
import { profileAad } from "../../services/profiles/profiles.models";
import { startTestApp, testConfig, waitForRoutes, type TestApp } from "../helpers/app";
import { createPgDatabase, createTestDatabase, itWithPostgres } from "../helpers/db";
import { Http } from "../helpers/http";
import { seededDataDir } from "../helpers/template-db";
import { productScript } from "../helpers/product-build";

const ROOT = path.join(__dirname, "../..");
const OLD = randomBytes(32);
const NEW = randomBytes(32);
const b64 = (k: Buffer) => k.toString("base64");

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `npm run admin -- <args>` as an operator runs it: its own process and environment. */
function admin(args: string[], env: Record<string, string>): Promise<Run> {
  return new Promise((resolve, reject) => {
    const clean = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|DATA_DIR|TRANSPORTER|SERVICES|PORT|TEST_|LOG_|SECRETS_)/.test(k)),
    );
    const child = spawn(process.execPath, [...productScript("admin"), ...args], { cwd: ROOT, env: { ...clean, LOG_LEVEL: "warn", ...env } });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60000);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** The service (gateway, auth, profiles) on this database with these keys. */
async function service(where: { dataDir?: string; databaseUrl?: string }, current: Buffer, previous: Buffer | null) {
  const config = testConfig({
    dataDir: where.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), "pgw-data-")),
    databaseUrl: where.databaseUrl ?? null,
    secretsKey: b64(current),
    secretsKeyPrevious: previous ? b64(previous) : null,
  });
  const app = await startApp(config, { services: ["gateway", "auth", "profiles"] });
  await waitForRoutes(`http://127.0.0.1:${app.port}`);
  return app;
}

type SealedRow = { token_key_id: string; token_iv: Buffer; token_tag: Buffer; token_ciphertext: Buffer };
const rowOf = async (sequelize: Sequelize, id: string) =>
  (
    await sequelize.query<SealedRow>("SELECT token_key_id, token_iv, token_tag, token_ciphertext FROM social_profiles WHERE id = $1", {
      bind: [id],
      type: QueryTypes.SELECT,
    })
  )[0]!;
const toSealedRow = (r: SealedRow) => ({ keyId: r.token_key_id, iv: r.token_iv, tag: r.token_tag, ciphertext: r.token_ciphertext });
const tokenOf = (app: App, companyId: string, id: string) =>
  app.broker.call("profiles.accessToken", { companyId, id }).then((r) => (r as { accessToken: string }).accessToken);
const keyIds = async (sequelize: Sequelize) =>
  (await sequelize.query<{ id: string; token_key_id: string }>("SELECT id, token_key_id FROM social_profiles ORDER BY id", { type: QueryTypes.SELECT })).map(
    (r) => r.token_key_id,
  );

/** The whole procedure against one database; `env` points the admin command at it. */
async function rotationProcedure(where: { dataDir?: string; databaseUrl?: string }, env: Record<string, string>, extra: string[] = []) {
  const tokens = Array.from({ length: 7 }, (_, i) => `tok-${i}-${randomBytes(8).toString("hex")}`);
  // 1. Tokens written under the old key only.
  const first = await service(where, OLD, null);
  const companyId = `acme-${randomBytes(4).toString("hex")}`;
  const key = await createKeyAsAdmin(first.db.sequelize, { companyId, userId: null, operations: ["SOCIAL_PROFILES"], trafficType: "TRANSACTIONAL" });
  let api = new Http(`http://127.0.0.1:${first.port}${API_PREFIX}`, { "x-api-key": key.apiKey });
  const ids: string[] = [];
  for (const [i, accessToken] of tokens.entries()) {
    const res = await api.post("/social-profiles", { network: "X", externalId: `e${i}`, accessToken });
    expect(res.status).toBe(201);
    ids.push(res.body.id);
  }
  expect(new Set(await keyIds(first.db.sequelize))).toEqual(new Set([keyIdOf(OLD)]));
  await first.stop();

  // 2. Rolled: new key current, old key previous. One token is replaced meanwhile (under the new key).
  const rolled = await service(where, NEW, OLD);
  api = new Http(`http://127.0.0.1:${rolled.port}${API_PREFIX}`, { "x-api-key": key.apiKey });
  tokens[0] = `replaced-${randomBytes(8).toString("hex")}`;
  expect((await api.put(`/social-profiles/${ids[0]}/token`, { accessToken: tokens[0] })).status).toBe(200);
  for (const [i, id] of ids.entries()) expect(await tokenOf(rolled, companyId, id)).toBe(tokens[i]);

  // 3. The admin command, beside the running service, in small batches; then again with nothing running.
  try {
    const run = await admin(["secrets:rotate", ...extra], { ...env, SECRETS_KEY: b64(NEW), SECRETS_KEY_PREVIOUS: b64(OLD) });
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(run.stdout.trim().split("\n")).toHaveLength(1);
    expect(JSON.parse(run.stdout)).toEqual({ rotated: 6, alreadyCurrent: 1, failed: 0, remaining: 0 });
  } finally {
    await rolled.stop();
  }
  const again = await admin(["secrets:rotate"], { ...env, SECRETS_KEY: b64(NEW), SECRETS_KEY_PREVIOUS: b64(OLD) });
  expect(again.code).toBe(0);
  expect(JSON.parse(again.stdout)).toEqual({ rotated: 0, alreadyCurrent: 7, failed: 0, remaining: 0 });

  // 4. The old key dropped: every token still reads, every row under the new key id.
  const after = await service(where, NEW, null);
  try {
    expect(new Set(await keyIds(after.db.sequelize))).toEqual(new Set([keyIdOf(NEW)]));
    for (const [i, id] of ids.entries()) expect(await tokenOf(after, companyId, id)).toBe(tokens[i]);

    // 5. A token under a key nobody has: exit 1 naming its id; the others are left as they are.
    const stray = new SecretBox(randomBytes(32)).seal("stray-token-value", profileAad(companyId, ids[3]!));
    await after.db.sequelize.query("UPDATE social_profiles SET token_key_id = $2, token_iv = $3, token_tag = $4, token_ciphertext = $5 WHERE id = $1", {
      bind: [ids[3], stray.keyId, stray.iv, stray.tag, stray.ciphertext],
    });
    const failing = await admin(["secrets:rotate"], { ...env, SECRETS_KEY: b64(NEW) });
    expect(failing.code).toBe(1);
    expect(JSON.parse(failing.stdout)).toEqual({ rotated: 0, alreadyCurrent: 6, failed: 1, remaining: 1 });
    expect(failing.stderr).toContain(ids[3]);
    expect(failing.stderr).toContain(stray.keyId);
    expect(failing.stdout + failing.stderr).not.toContain("stray-token-value");
    for (const t of tokens) expect(failing.stdout + failing.stderr).not.toContain(t);
    expect(await tokenOf(after, companyId, ids[4]!)).toBe(tokens[4]);
  } finally {
    await after.stop();
  }
}

describe("npm run admin -- secrets:rotate", () => {
  it("re-encrypts every token under the new key in an embedded DATA_DIR, beside the running service and with nothing running", async () => {
    const dataDir = await seededDataDir();
    await rotationProcedure({ dataDir }, { DATA_DIR: dataDir }, ["--batch-size", "2"]);
  }, 120000);

  itWithPostgres(
    "re-encrypts every token under the new key in the PostgreSQL at DATABASE_URL",
    async () => {
      const pg = await createPgDatabase();
      try {
        await rotationProcedure({ databaseUrl: pg.url }, { DATABASE_URL: pg.url });
      } finally {
        await pg.drop();
      }
    },
    120000,
  );

  it.each([
    [["secrets:rotate", "now"], 'unexpected argument "now"'],
    [["secrets:rotate", "--company", "acme"], "secrets:rotate takes no options but --batch-size"],
    [["secrets:rotate", "--batch", "5"], "Unknown option"],
    [["secrets:rotate", "--batch-size", "0"], "--batch-size must be"],
    [["secrets:rotate", "--batch-size", "ten"], "--batch-size must be"],
    [["keys:create", "--company", "acme", "--operations", "SMS", "--batch-size", "5"], "--batch-size is an option of secrets:rotate"],
  ])("exits 2 with a message for bad arguments %j, opening nothing", async (args, message) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pgw-data-"));
    const run = await admin(args as string[], { DATA_DIR: dir });
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain(message);
    expect(fs.readdirSync(dir)).toEqual([]);
  });
});

describe("secrets:rotate never creates a key", () => {
  const other = randomBytes(32);
  it.each([
    ["DATABASE_URL without SECRETS_KEY", { DATABASE_URL: "postgres://nobody@127.0.0.1:1/none" }, "SECRETS_KEY is not set; with DATABASE_URL"],
    ["SECRETS_KEY_PREVIOUS without SECRETS_KEY", { SECRETS_KEY_PREVIOUS: b64(other) }, "SECRETS_KEY_PREVIOUS is set but SECRETS_KEY is not"],
    ["neither SECRETS_KEY nor a key file in DATA_DIR", {}, "never creates a key"],
    ["SECRETS_KEY equal to SECRETS_KEY_PREVIOUS", { SECRETS_KEY: b64(other), SECRETS_KEY_PREVIOUS: b64(other).replace(/=$/, "") }, "are the same key"],
  ])("exits 2 with one line for %s, writing nothing", async (_what, env, message) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pgw-data-"));
    const run = await admin(["secrets:rotate"], { DATA_DIR: dir, ...env });
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain(message);
    expect(run.stderr.trim().split("\n")).toHaveLength(1);
    expect(fs.readdirSync(dir)).toEqual([]);
  });

  it("uses the key file an embedded DATA_DIR already holds, leaving it as it is", async () => {
    const dir = await seededDataDir();
    const file = path.join(dir, "secrets.key");
    fs.writeFileSync(file, b64(OLD), { mode: 0o600 });
    const run = await admin(["secrets:rotate"], { DATA_DIR: dir });
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ rotated: 0, failed: 0 });
    expect(fs.readFileSync(file, "utf8")).toBe(b64(OLD));
  }, 60000);
});

describe("rows written under the old key behind the walk", () => {
  const insertOld = async (sequelize: Sequelize, id: string, token: string) => {
    const s = new SecretBox(OLD).seal(token, profileAad("acme", id));
    await sequelize.query(
      `INSERT INTO social_profiles (id, company_id, network, external_id, token_key_id, token_iv, token_tag, token_ciphertext) VALUES ($1, 'acme', 'X', $6, $2, $3, $4, $5)`,
      { bind: [id, s.keyId, s.iv, s.tag, s.ciphertext, `e-${id}`] },
    );
  };
  const uuid = (n: number) => `00000000-0000-4000-8000-${n.toString(16).padStart(12, "0")}`;
  const box = new SecretBox(NEW, OLD);

  it("are caught by another walk, and only unreadable rows are named, once each, as they are met", async () => {
    const tdb = await createTestDatabase();
    try {
      const { sequelize } = tdb.db;
      for (let i = 0; i < 5; i++) await insertOld(sequelize, `ffffffff-0000-4000-8000-00000000000${i}`, `t${i}`);
      const stray = new SecretBox(randomBytes(32)).seal("stray", profileAad("acme", uuid(0xfff)));
      await sequelize.query(
        `INSERT INTO social_profiles (id, company_id, network, external_id, token_key_id, token_iv, token_tag, token_ciphertext) VALUES ($1, 'acme', 'X', 's', $2, $3, $4, $5)`,
        { bind: [uuid(0xfff), stray.keyId, stray.iv, stray.tag, stray.ciphertext] },
      );
      let behind = 0;
      const failures: string[] = [];
      const result = await rotateTokens(sequelize, box, {
        batchSize: 2,
        onFailure: (id) => failures.push(id),
        // A node not yet rolled writes under the old key, below where the first walk has got to.
        onBatch: async (pass) => {
          if (pass === 1 && behind < 2) await insertOld(sequelize, uuid(++behind), `behind-${behind}`);
        },
      });
      expect(result).toEqual({ rotated: 7, alreadyCurrent: 0, failed: 1, remaining: 1 });
      expect(failures).toEqual([uuid(0xfff)]);
      expect(box.open(toSealedRow(await rowOf(sequelize, uuid(1))), profileAad("acme", uuid(1)))).toBe("behind-1");
      expect((await rowOf(sequelize, uuid(2))).token_key_id).toBe(keyIdOf(NEW));
    } finally {
      await tdb.drop();
    }
  });

  it("after three walks, reports what is still under the old key; the admin command would exit 1", async () => {
    const tdb = await createTestDatabase();
    try {
      const { sequelize } = tdb.db;
      for (let i = 0; i < 3; i++) await insertOld(sequelize, `ffffffff-0000-4000-8000-00000000000${i}`, `t${i}`);
      // Every batch, a row under the old key lands below where the walk has got to (ids decreasing).
      let n = 0;
      const result = await rotateTokens(sequelize, box, { batchSize: 1, onBatch: () => insertOld(sequelize, uuid(0x10000 - ++n), `behind-${n}`) });
      expect(result.remaining).toBeGreaterThan(0);
      expect(result.failed).toBe(0);
      expect(result.remaining).toBe(
        Number(
          (
            await sequelize.query<{ n: string }>("SELECT count(*) AS n FROM social_profiles WHERE token_key_id <> $1", {
              bind: [keyIdOf(NEW)],
              type: QueryTypes.SELECT,
            })
          )[0]!.n,
        ),
      );
    } finally {
      await tdb.drop();
    }
  });
});

describe("the zero-downtime rotation (docs/security.md), profiles nodes of two settings side by side", () => {
  it("lets every node read every token at every step: (a) old + previous new, (b) new + previous old, (c) rotate, (d) new alone", async () => {
    const tdb = await createTestDatabase();
    const running: TestApp[] = [];
    const node = async (current: Buffer, previous: Buffer | null) => {
      const n = await startTestApp({
        services: ["profiles"],
        db: tdb.db,
        config: { secretsKey: b64(current), secretsKeyPrevious: previous ? b64(previous) : null },
      });
      running.push(n);
      return n;
    };
    const stop = async (n: TestApp) => {
      running.splice(running.indexOf(n), 1);
      await n.app.stop();
    };
    const companyId = `acme-${randomBytes(4).toString("hex")}`;
    const written = new Map<string, string>();
    let seq = 0;
    const create = async (n: TestApp) => {
      const accessToken = `tok-${++seq}-${randomBytes(6).toString("hex")}`;
      const out = (await n.app.broker.call("profiles.create", { network: "X", externalId: `e${seq}`, accessToken }, { meta: { companyId } })) as { id: string };
      return { id: out.id, accessToken };
    };
    const write = async (n: TestApp) => {
      const { id, accessToken } = await create(n);
      written.set(id, accessToken);
      // And a token replaced by this node on a profile another one wrote.
      const other = [...written.keys()][0]!;
      const replaced = `put-${++seq}`;
      await n.app.broker.call("profiles.replaceToken", { id: other, accessToken: replaced }, { meta: { companyId } });
      written.set(other, replaced);
    };
    const everyNodeReadsAll = async (...nodes: TestApp[]) => {
      for (const n of nodes) for (const [id, token] of written) expect(await tokenOf(n.app, companyId, id)).toBe(token);
    };
    try {
      const before = await node(OLD, null);
      const first = await create(before);
      written.set(first.id, first.accessToken);

      // Why step (a): a node still on the old key alone cannot read what a node on the new key wrote.
      const tooEarly = await node(NEW, OLD);
      const unread = await create(tooEarly);
      await expect(tokenOf(before.app, companyId, unread.id)).rejects.toMatchObject({ type: "PROFILE_TOKEN_UNREADABLE" });
      await tooEarly.app.broker.call("profiles.remove", { id: unread.id }, { meta: { companyId } });
      await stop(tooEarly);

      // (a) Rolling to SECRETS_KEY=old, SECRETS_KEY_PREVIOUS=new: both kinds of node write under the old key.
      const a = await node(OLD, NEW);
      await write(a);
      await write(before);
      await everyNodeReadsAll(before, a);
      expect(new Set(await keyIds(tdb.db.sequelize))).toEqual(new Set([keyIdOf(OLD)]));
      await stop(before);

      // (b) Rolling to SECRETS_KEY=new, SECRETS_KEY_PREVIOUS=old: what either writes, both read.
      const b = await node(NEW, OLD);
      await write(b);
      await write(a);
      await everyNodeReadsAll(a, b);
      expect(new Set(await keyIds(tdb.db.sequelize))).toEqual(new Set([keyIdOf(OLD), keyIdOf(NEW)]));
      await stop(a);

      // (c) The rotation, with (b)'s settings, while (b) nodes keep writing.
      const rotation = rotateSecrets(tdb.db.sequelize, { secretsKey: b64(NEW), secretsKeyPrevious: b64(OLD), dataDir: os.tmpdir() }, 1);
      await write(b);
      expect(await rotation).toMatchObject({ failed: 0, remaining: 0 });
      expect(new Set(await keyIds(tdb.db.sequelize))).toEqual(new Set([keyIdOf(NEW)]));

      // (d) Rolling to SECRETS_KEY=new alone.
      const d = await node(NEW, null);
      await write(d);
      await write(b);
      await everyNodeReadsAll(b, d);
      await stop(b);
      await everyNodeReadsAll(d);
    } finally {
      for (const n of running) await n.app.stop();
      await tdb.drop();
    }
  }, 120000);
});

describe("rotation beside a concurrent token change", () => {
  // On PGlite (one session) the rotation merely queues behind the transaction: only PostgreSQL's row locks make this a test.
  itWithPostgres(
    "never overwrites a token given while the rotation waits for its row",
    async () => {
      const tdb = await createTestDatabase();
      try {
        const { sequelize } = tdb.db;
        const id = "5f0c6a1e-3b7d-4c2a-9e51-8d4f2b6a7c10";
        const aad = profileAad("acme", id);
        const old = new SecretBox(OLD);
        const s = old.seal("before", aad);
        await sequelize.query(
          `INSERT INTO social_profiles (id, company_id, network, external_id, token_key_id, token_iv, token_tag, token_ciphertext) VALUES ($1, 'acme', 'X', 'e', $2, $3, $4, $5)`,
          { bind: [id, s.keyId, s.iv, s.tag, s.ciphertext] },
        );
        const config = { secretsKey: b64(NEW), secretsKeyPrevious: b64(OLD), dataDir: os.tmpdir() };
        let settled = false;
        let rotation: Promise<unknown> | null = null;
        await sequelize.transaction(async (transaction) => {
          // A PUT token from a node not yet rolled (old key current) holds the row...
          await sequelize.query("SELECT id FROM social_profiles WHERE id = $1 FOR UPDATE", { bind: [id], transaction });
          rotation = rotateSecrets(sequelize, config, 10).finally(() => (settled = true));
          await new Promise((r) => setTimeout(r, 300));
          expect(settled).toBe(false);
          const given = old.seal("given-meanwhile", aad);
          await sequelize.query("UPDATE social_profiles SET token_key_id = $2, token_iv = $3, token_tag = $4, token_ciphertext = $5 WHERE id = $1", {
            bind: [id, given.keyId, given.iv, given.tag, given.ciphertext],
            transaction,
          });
        });
        // ...and the rotation re-seals what it then finds: the token given meanwhile, not the one it first saw.
        expect(await rotation).toEqual({ rotated: 1, alreadyCurrent: 0, failed: 0, remaining: 0 });
        const [row] = await sequelize.query<{ token_key_id: string; token_iv: Buffer; token_tag: Buffer; token_ciphertext: Buffer }>(
          "SELECT token_key_id, token_iv, token_tag, token_ciphertext FROM social_profiles WHERE id = $1",
          { bind: [id], type: QueryTypes.SELECT },
        );
        expect(row!.token_key_id).toBe(keyIdOf(NEW));
        const sealed = { keyId: row!.token_key_id, iv: row!.token_iv, tag: row!.token_tag, ciphertext: row!.token_ciphertext };
        expect(new SecretBox(NEW).open(sealed, aad)).toBe("given-meanwhile");
      } finally {
        await tdb.drop();
      }
    },
    60000,
  );
});
