/**
 * Two projects, one run (`npm test`, at most 4 workers between them):
 *  - main: every test, on the PostgreSQL at TEST_DATABASE_URL when set (CI), else embedded PGlite;
 *  - e2e-embedded: the end-to-end files whose subject meets what sets embedded PGlite apart (what
 *    `npm start` runs without DATABASE_URL), run again on it, only when TEST_DATABASE_URL is set
 *    (without it the main project runs every file on PGlite).
 */
const transform = { "^.+\\.ts$": ["@swc/jest", { jsc: { target: "es2023", parser: { syntax: "typescript" } }, module: { type: "commonjs" } }] };
// umzug's CLI (never used by the product) would load @rushstack's packages again for every file.
// clients/typescript is an ES module package whose imports name their files as `./x.js` (Node's rule); jest reads the .ts.
const moduleNameMapper = {
  "^@rushstack/ts-command-line$": "<rootDir>/test/helpers/stub-ts-command-line.js",
  "^\\./(index|schema|example)\\.js$": "<rootDir>/clients/typescript/$1.ts",
};
const common = { testEnvironment: "node", roots: ["<rootDir>/test"], transform, moduleNameMapper, testTimeout: 60000 };

const projects = [{ ...common, displayName: "main", testMatch: ["**/*.spec.ts"] }];
if (process.env.TEST_DATABASE_URL) {
  projects.push({
    ...common,
    displayName: "e2e-embedded",
    // Embedded PGlite is one session behind a socket (every connection of every service, and of the
    // export and import worker threads, queued on it), and the heavy gate runs one statement at a
    // time there. What is the same SQL on the same schema needs no second pass; these files do:
    // every operation once (api-walk), the gate's embedded branch (campaigns-preview), and what holds
    // a transaction or a claim while others wait: the sender (send, consent, restart), imports and
    // exports from their worker threads, the notifier's attempts, the inbox's live stream, the
    // ingress's group commit, media references, concurrent Idempotency-Keys. The other 35 e2e files
    // ran here too until jest had to fit 300 s (they were a third of the suite's time); they run on
    // PGlite on every machine without TEST_DATABASE_URL, as `npm test` does on a fresh clone. Within
    // these files, the groups whose subject is the same on either engine (the notifier's retry
    // schedule, upload refusals and zip bombs, download URLs, slow SSE clients...) are left to the
    // main project: describeOncePerRun (test/helpers/db.ts).
    testMatch: [
      "api-walk",
      "campaigns-preview",
      "campaigns-send",
      "campaigns-consent",
      "campaigns-restart",
      "contact-imports",
      "exports",
      "webhook-delivery",
      "inbox-live",
      "tracking-ingress",
      "media",
      "idempotency",
    ].map((f) => `<rootDir>/test/e2e/${f}.spec.ts`),
    // Clears TEST_DATABASE_URL (and REQUIRE_REAL_SERVICES) for these files before test/helpers/db.ts reads them.
    setupFiles: ["<rootDir>/test/helpers/embedded-project.ts"],
  });
}

/** @type {import('jest').Config} */
module.exports = {
  projects,
  testTimeout: 60000,
  // Four files at once on this 2-core machine: most of a file's time is spent waiting (on processes
  // started and killed, NATS heartbeats, back-offs, a second node), so two workers left the cores
  // idle a third of the time (jest 1,107 s with 2 workers, 553 s with 4, the same 2,200 s of files).
  maxWorkers: 4,
  // A worker whose heap passed 1 GB after a file is replaced by a fresh one: an app's brokers and
  // embedded PGlite instances leave memory behind, and four workers that keep it reached 4-5 GB each.
  workerIdleMemoryLimit: "1GB",
  // The longest files first, also on a fresh clone (test/helpers/sequencer.js).
  testSequencer: "<rootDir>/test/helpers/sequencer.js",
  // Each file starts its own brokers and database; a file left running must not hold the run.
  forceExit: true,
  // Migrates once per run into a template (PostgreSQL) and a snapshot (PGlite) that each file copies.
  globalSetup: "<rootDir>/test/helpers/global-setup.ts",
  // summary-reporter writes .test-results.json (read by .ci/run); progress-reporter prints "[n/N] PASS ..." per file.
  reporters: ["default", "<rootDir>/test/helpers/summary-reporter.js", "<rootDir>/test/helpers/progress-reporter.js"],
};
