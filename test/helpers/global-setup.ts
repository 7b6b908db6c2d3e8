/**
 * jest globalSetup: builds the migrated PostgreSQL template and PGlite snapshot (template-db.ts)
 * once, before any worker starts, so that no test file pays for the build inside its own hook
 * timeout. Both are kept between runs (keyed by the migrations' hash), so this is quick after the
 * first run; a file run without this setup builds what it misses itself, under the same locks.
 * It also compiles the product for the tests that run its nodes as OS processes (product-build.ts).
 */
import { productBuild } from "./product-build";
import { pgliteSnapshot, pgTemplate } from "./template-db";

export default async function globalSetup(): Promise<void> {
  const started = Date.now();
  const url = process.env.TEST_DATABASE_URL;
  // The PGlite snapshot serves the e2e-embedded project, and every file when there is no PostgreSQL.
  productBuild();
  await Promise.all([url ? pgTemplate(url) : null, pgliteSnapshot()]);
  const ms = Date.now() - started;
  if (ms > 2000) process.stdout.write(`\nMigrated test templates ready in ${(ms / 1000).toFixed(1)} s\n`);
}
