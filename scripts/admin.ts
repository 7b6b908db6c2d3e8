/**
 * Administration without an API key (the first key of an account, recovery):
 *
 *   npm run admin -- keys:create --company <companyId> [--user <userId>] [--traffic-type MARKETING]
 *                    --operations SMS,RCS,...|ALL
 *
 * Prints one JSON object, the 201 body of POST /authentication, and exits 0; bad arguments print a
 * message and exit 2.
 *
 *   npm run admin -- secrets:rotate [--batch-size 500]
 *
 * Re-encrypts every stored secret not already under SECRETS_KEY (social-profile access tokens and
 * webhook signing secrets, reading with SECRETS_KEY or SECRETS_KEY_PREVIOUS) and prints one JSON line
 * `{ "rotated", "alreadyCurrent", "failed", "remaining" }` (secrets of both kinds counted together):
 * exit 0, or 1 when some secret could not be decrypted (profile ids and accounts on stderr as met,
 * never a secret) or some row is still not under SECRETS_KEY after three walks (`remaining`). Works against the same DATA_DIR or DATABASE_URL as the service, whether the
 * service is running or not (embedded: it connects to the running service's database, or opens
 * the data directory itself while holding its lock). It never creates a key: SECRETS_KEY is
 * required with DATABASE_URL or SECRETS_KEY_PREVIOUS, and without it an embedded DATA_DIR must already
 * hold its key file; SECRETS_KEY equal to SECRETS_KEY_PREVIOUS is refused too (each exit 2, one line).
 */
import { parseArgs } from "node:util";
import { OPERATIONS, TRAFFIC_TYPES, type Operation, type TrafficType } from "../lib/http/api";
import type { Sequelize } from "sequelize";
import type { Config } from "../lib/config";

// The arguments are checked before the rest is loaded (the configuration, the database, the
// services' contracts: over a second of CPU), so that a mistyped command answers at once.
const load = async () => ({
  ...(await import("../lib/config.js")),
  ...(await import("../lib/db/db.js")),
  ...(await import("../lib/errors.js")),
  ...(await import("../services/auth/auth.contract.js")),
  ...(await import("../services/notifier/notifier.contract.js")),
  ...(await import("../services/profiles/profiles.contract.js")),
});

const USAGE = [
  `usage: npm run admin -- keys:create --company <companyId> [--user <userId>] [--traffic-type TRANSACTIONAL|MARKETING] --operations ${OPERATIONS.slice(0, 3).join(",")},...|ALL`,
  "       npm run admin -- secrets:rotate [--batch-size 500]",
].join("\n");
const ID_RE = /^[A-Za-z0-9._@:-]{1,128}$/;

class UsageError extends Error {}

export interface KeysCreateArgs {
  companyId: string;
  userId: string | null;
  trafficType: TrafficType;
  operations: Operation[];
}

export type AdminCommand = { command: "keys:create"; args: KeysCreateArgs } | { command: "secrets:rotate"; batchSize: number };

/** Parses and checks the arguments; throws UsageError with a one-line reason. */
export function parseAdminArgs(argv: string[]): AdminCommand {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        company: { type: "string" },
        user: { type: "string" },
        "traffic-type": { type: "string" },
        operations: { type: "string" },
        "batch-size": { type: "string" },
      },
    });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const [command, ...rest] = parsed.positionals;
  if (command !== "keys:create" && command !== "secrets:rotate") throw new UsageError(command ? `unknown command "${command}"` : "no command given");
  if (rest.length) throw new UsageError(`unexpected argument "${rest[0]}"`);
  const v = parsed.values;
  if (command === "secrets:rotate") {
    const given = Object.keys(v).filter((k) => k !== "batch-size");
    if (given.length) throw new UsageError(`secrets:rotate takes no options but --batch-size (got --${given[0]})`);
    const size = v["batch-size"];
    if (size !== undefined && !/^[1-9]\d{0,4}$/.test(size)) throw new UsageError("--batch-size must be an integer from 1 to 99999");
    return { command, batchSize: size === undefined ? 500 : Number(size) };
  }
  if (v["batch-size"] !== undefined) throw new UsageError("--batch-size is an option of secrets:rotate");
  if (!v.company) throw new UsageError("--company is required");
  if (!ID_RE.test(v.company)) throw new UsageError("--company must be 1-128 of A-Z a-z 0-9 . _ @ : -");
  if (v.user !== undefined && !ID_RE.test(v.user)) throw new UsageError("--user must be 1-128 of A-Z a-z 0-9 . _ @ : -");
  const trafficType = (v["traffic-type"] ?? "TRANSACTIONAL").toUpperCase();
  if (!(TRAFFIC_TYPES as readonly string[]).includes(trafficType)) throw new UsageError(`--traffic-type must be ${TRAFFIC_TYPES.join(" or ")}`);
  if (!v.operations) throw new UsageError("--operations is required (a comma-separated list, or ALL)");
  const ops =
    v.operations.trim().toUpperCase() === "ALL"
      ? [...OPERATIONS]
      : v.operations
          .split(",")
          .map((s) => s.trim().toUpperCase())
          .filter(Boolean);
  const unknown = ops.filter((o) => !(OPERATIONS as readonly string[]).includes(o));
  if (unknown.length) throw new UsageError(`unknown operation(s) ${unknown.join(", ")}; known: ${OPERATIONS.join(", ")}`);
  if (ops.length === 0) throw new UsageError("--operations must name at least one operation");
  return {
    command: "keys:create",
    args: { companyId: v.company, userId: v.user ?? null, trafficType: trafficType as TrafficType, operations: [...new Set(ops)] as Operation[] },
  };
}

async function main(): Promise<number> {
  let cmd;
  try {
    cmd = parseAdminArgs(process.argv.slice(2));
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`admin: ${e.message}\n${USAGE}\n`);
      return 2;
    }
    throw e;
  }
  const { ApiError, ConfigError, createKeyAsAdmin, loadConfig, openDatabase, rotationKeyProblem } = await load();
  let config;
  try {
    config = loadConfig(process.env, { logFormat: "json" });
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`admin: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  if (cmd.command === "secrets:rotate") {
    const problem = rotationKeyProblem(config);
    if (problem) {
      process.stderr.write(`admin: ${problem}\n`);
      return 2;
    }
  }
  const db = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, role: "admin", poolMax: 2 });
  try {
    if (cmd.command === "secrets:rotate") return await rotate(db.sequelize, config, cmd.batchSize);
    let created;
    try {
      created = await createKeyAsAdmin(db.sequelize, { ...cmd.args, createdBy: null }, config.maxKeysPerAccount);
    } catch (e) {
      if (e instanceof ApiError && e.type === "KEY_LIMIT_REACHED") {
        process.stderr.write(`admin: ${e.message} (MAX_KEYS_PER_ACCOUNT=${config.maxKeysPerAccount})\n`);
        return 2;
      }
      throw e;
    }
    process.stdout.write(`${JSON.stringify(created)}\n`);
    return 0;
  } finally {
    await db.close();
  }
}

/**
 * secrets:rotate: one JSON line of counts (profile tokens and webhook signing secrets together); each
 * secret no configured key opens is named on stderr as it is met (ids only, nothing kept). Exit 1
 * when some secret is still not under SECRETS_KEY.
 */
async function rotate(sequelize: Sequelize, config: Config, batchSize: number): Promise<number> {
  const { rotateSecrets, rotateSigningSecrets } = await load();
  const onFailure = (id: string, reason: string) => process.stderr.write(`admin: social profile ${id}: access token not rotated, ${reason}\n`);
  const tokens = await rotateSecrets(sequelize, config, batchSize, { onFailure });
  const onWebhookFailure = (companyId: string, reason: string) => process.stderr.write(`admin: webhook of account ${companyId}: not rotated, ${reason}\n`);
  const signing = await rotateSigningSecrets(sequelize, config, batchSize, { onFailure: onWebhookFailure });
  const [rotated, alreadyCurrent, failed, remaining] = (["rotated", "alreadyCurrent", "failed", "remaining"] as const).map((k) => tokens[k] + signing[k]);
  process.stdout.write(`${JSON.stringify({ rotated, alreadyCurrent, failed, remaining })}\n`);
  if (remaining > failed) process.stderr.write(`admin: ${remaining - failed} secret(s) were written under an old key during the rotation; run it again\n`);
  return failed > 0 || remaining > 0 ? 1 : 0;
}

if (require.main === module) {
  main().then(
    (code) => process.exit(code),
    (e: Error) => {
      process.stderr.write(`admin: ${e.message}\n`);
      process.exit(1);
    },
  );
}
