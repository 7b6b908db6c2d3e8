/**
 * Two projects, one run (`npm test`, at most 2 workers between them):
 *  - main: every test, on the PostgreSQL at TEST_DATABASE_URL when set (CI), else embedded PGlite;
 *  - e2e-embedded: test/e2e again on embedded PGlite (what `npm start` runs without DATABASE_URL),
 *    only when TEST_DATABASE_URL is set (without it the main project already ran them on PGlite).
 */
const transform = { "^.+\\.ts$": ["@swc/jest", { jsc: { target: "es2023", parser: { syntax: "typescript" } }, module: { type: "commonjs" } }] };
const common = { testEnvironment: "node", roots: ["<rootDir>/test"], transform, testTimeout: 60000 };

const projects = [{ ...common, displayName: "main", testMatch: ["**/*.spec.ts"] }];
if (process.env.TEST_DATABASE_URL) {
  projects.push({
    ...common,
    displayName: "e2e-embedded",
    testMatch: ["<rootDir>/test/e2e/**/*.spec.ts"],
    // 100,000 rows inserted and exported: minutes on single-session PGlite, and what it proves
    // (cell-for-cell CSV from PostgreSQL's COPY) does not depend on the database's kind.
    // The reference in a browser (docs-browser) does not depend on the database's kind either.
    testPathIgnorePatterns: ["/node_modules/", "/test/e2e/exports-large\\.spec\\.ts$", "/test/e2e/docs-browser\\.spec\\.ts$"],
    // Clears TEST_DATABASE_URL (and REQUIRE_REAL_SERVICES) for these files before test/helpers/db.ts reads them.
    setupFiles: ["<rootDir>/test/helpers/embedded-project.ts"],
  });
}

/** @type {import('jest').Config} */
module.exports = {
  projects,
  testTimeout: 60000,
  maxWorkers: 2,
  // Each file starts its own brokers and database; a file left running must not hold the run.
  forceExit: true,
  reporters: ["default", "<rootDir>/test/helpers/summary-reporter.js"],
};
