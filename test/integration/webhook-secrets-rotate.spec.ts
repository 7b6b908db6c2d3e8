/**
 * Rotating SECRETS_KEY re-seals webhook signing secrets too (docs/security.md "Rotating SECRETS_KEY"):
 * secrets sealed under the old key (current and a rotation's replaced one) are re-sealed under the
 * new key by what `npm run admin -- secrets:rotate` runs, still opening to the same secret; one no
 * configured key opens is left, reported by account and never by content; and the admin command's
 * one line counts them with the profiles' tokens.
 */
import { randomBytes } from "node:crypto";
import { spawn } from "node:child_process";
import os from "node:os";
import path from "node:path";
import { QueryTypes, type Sequelize } from "sequelize";
import { openDatabase } from "../../lib/db/db";
import { keyIdOf, packSealed, SecretBox, unpackSealed } from "../../lib/security/secrets";
import { rotateSigningSecrets } from "../../services/notifier/notifier.contract";
import { newSigningSecret, signingAad } from "../../services/notifier/notifier.signing";
import { uid } from "../helpers/app";
import { createPgDatabase, createTestDatabase, itWithPostgres, type TestDatabase } from "../helpers/db";
import { productScript } from "../helpers/product-build";

const ROOT = path.join(__dirname, "../..");
const OLD = randomBytes(32);
const NEW = randomBytes(32);
const LOST = randomBytes(32);
const b64 = (k: Buffer) => k.toString("base64");

interface Row {
  company_id: string;
  signing_key_id: string | null;
  signing_secret: Buffer | null;
  previous_signing_key_id: string | null;
  previous_signing_secret: Buffer | null;
}

/** A signed webhook written as the notifier writes it, its secrets sealed under `current` (and `previous` when given). */
async function webhook(sequelize: Sequelize, under: Buffer, replaced: Buffer | null = null) {
  const companyId = uid();
  const secret = newSigningSecret();
  const old = newSigningSecret();
  const seal = (key: Buffer, s: string) => new SecretBox(key).seal(s, signingAad(companyId));
  const a = seal(under, secret);
  const b = replaced ? seal(replaced, old) : null;
  await sequelize.query(
    `INSERT INTO webhooks (company_id, callback_url, signing_key_id, signing_secret, signing_version, previous_signing_key_id, previous_signing_secret, previous_signing_until)
     VALUES ($1, 'https://hooks.example.com/x', $2, $3, nextval('webhook_signing_versions'), $4, $5, CASE WHEN $5::bytea IS NULL THEN NULL ELSE now() + interval '1 hour' END)`,
    { bind: [companyId, a.keyId, packSealed(a), b?.keyId ?? null, b ? packSealed(b) : null] },
  );
  return { companyId, secret, old };
}

const rowOf = async (sequelize: Sequelize, companyId: string) =>
  (
    await sequelize.query<Row>(
      "SELECT company_id, signing_key_id, signing_secret, previous_signing_key_id, previous_signing_secret FROM webhooks WHERE company_id = $1",
      { bind: [companyId], type: QueryTypes.SELECT },
    )
  )[0]!;

describe("webhook signing secrets under a SECRETS_KEY rotation", () => {
  let tdb: TestDatabase;
  beforeAll(async () => {
    tdb = await createTestDatabase();
  });
  afterAll(() => tdb?.drop());

  it("re-seals current and replaced secrets under the new key, leaves (and names) one no key opens", async () => {
    const seq = tdb.db.sequelize;
    const both = await webhook(seq, OLD, OLD);
    const fresh = await webhook(seq, NEW, OLD);
    const lost = await webhook(seq, LOST);
    await seq.query(`INSERT INTO webhooks (company_id, callback_url) VALUES ($1, 'https://hooks.example.com/x')`, { bind: [uid()] });
    const failures: [string, string][] = [];
    const config = { secretsKey: b64(NEW), secretsKeyPrevious: b64(OLD), dataDir: os.tmpdir() };
    const result = await rotateSigningSecrets(seq, config, 1, { onFailure: (id, reason) => failures.push([id, reason]) });
    expect(result).toEqual({ rotated: 3, alreadyCurrent: 1, failed: 1, remaining: 1 });
    expect(failures).toHaveLength(1);
    expect(failures[0]![0]).toBe(lost.companyId);
    expect(failures[0]![1]).toContain(keyIdOf(LOST));
    expect(failures[0]![1]).not.toContain(lost.secret);

    const box = new SecretBox(NEW);
    for (const w of [both, fresh]) {
      const row = await rowOf(seq, w.companyId);
      expect([row.signing_key_id, row.previous_signing_key_id]).toEqual([keyIdOf(NEW), keyIdOf(NEW)]);
      expect(box.open(unpackSealed(row.signing_key_id!, row.signing_secret!), signingAad(w.companyId))).toBe(w.secret);
      expect(box.open(unpackSealed(row.previous_signing_key_id!, row.previous_signing_secret!), signingAad(w.companyId))).toBe(w.old);
    }
    expect((await rowOf(seq, lost.companyId)).signing_key_id).toBe(keyIdOf(LOST));
    // Bound to its account: a secret copied to another webhook does not open there.
    const row = await rowOf(seq, both.companyId);
    expect(() => box.open(unpackSealed(row.signing_key_id!, row.signing_secret!), signingAad(fresh.companyId))).toThrow(/does not authenticate/);

    expect(await rotateSigningSecrets(seq, config)).toEqual({ rotated: 0, alreadyCurrent: 4, failed: 1, remaining: 1 });
  });

  itWithPostgres(
    "counts webhook secrets in the one line of `npm run admin -- secrets:rotate`",
    async () => {
      const pgdb = await createPgDatabase();
      const db = await openDatabase({ databaseUrl: pgdb.url, dataDir: null });
      try {
        const w = await webhook(db.sequelize, OLD, OLD);
        const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
          const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(DATABASE_URL|DATA_DIR|TEST_|LOG_|SECRETS_)/.test(k)));
          const child = spawn(process.execPath, [...productScript("admin"), "secrets:rotate"], {
            cwd: ROOT,
            env: { ...clean, LOG_LEVEL: "warn", DATABASE_URL: pgdb.url, SECRETS_KEY: b64(NEW), SECRETS_KEY_PREVIOUS: b64(OLD) },
          });
          let stdout = "";
          let stderr = "";
          child.stdout.on("data", (d) => (stdout += d));
          child.stderr.on("data", (d) => (stderr += d));
          child.on("error", reject);
          child.on("close", (code) => resolve({ code, stdout, stderr }));
        });
        expect(run.stderr).toBe("");
        expect(run.code).toBe(0);
        expect(JSON.parse(run.stdout)).toEqual({ rotated: 2, alreadyCurrent: 0, failed: 0, remaining: 0 });
        expect((await rowOf(db.sequelize, w.companyId)).signing_key_id).toBe(keyIdOf(NEW));
      } finally {
        await db.close();
        await pgdb.drop();
      }
    },
    90_000,
  );
});
