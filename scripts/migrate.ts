/**
 * `npm run migrate` (in the image: `node dist/scripts/migrate.js`): applies the pending migrations
 * of the database at DATABASE_URL (or the embedded one under DATA_DIR) and exits, running no
 * service. The Kubernetes Job `migrate` runs it before a rollout; every node still migrates at
 * start under the same PostgreSQL advisory lock (lib/db/db.ts), so the two never race and whichever
 * comes first applies each migration once.
 *
 * Prints one JSON line, `{"applied":["20261126-0013-inbox", ...]}` (empty when nothing was
 * pending), and exits 0; a bad variable exits 2, a failed migration 1, each with one line on stderr.
 */
import { ConfigError, loadConfig } from "../lib/config";
import { migrate, openDatabase } from "../lib/db/db";

async function main(): Promise<number> {
  let config;
  try {
    // Only the database matters here: the checks of a node that runs services do not apply.
    config = loadConfig(process.env, { logFormat: "json" }, { runsServices: false });
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`migrate: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  const db = await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, role: "admin", poolMax: 2, migrate: false });
  try {
    const applied = await migrate(db);
    process.stdout.write(`${JSON.stringify({ applied })}\n`);
    return 0;
  } finally {
    await db.close();
  }
}

if (require.main === module) {
  main().then(
    (code) => process.exit(code),
    (e: Error) => {
      process.stderr.write(`migrate: ${e.message}\n`);
      process.exit(1);
    },
  );
}
