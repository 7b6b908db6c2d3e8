/**
 * setupFiles of the `e2e-embedded` jest project: the e2e files run again on embedded PGlite, as
 * `npm start` runs without DATABASE_URL. It runs before test/helpers/db.ts is imported (which reads
 * the environment once), so clearing TEST_DATABASE_URL here makes every test database of the file
 * an in-memory PGlite. REQUIRE_REAL_SERVICES is cleared too: PGlite is this project's point, and
 * the tests that need PostgreSQL (itWithPostgres) list themselves as todos here; the main project
 * runs them on PostgreSQL and fails them if it cannot.
 */
delete process.env.TEST_DATABASE_URL;
delete process.env.REQUIRE_REAL_SERVICES;
process.env.TEST_EMBEDDED_PROJECT = "1";
