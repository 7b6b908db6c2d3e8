/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: "node",
  roots: ["<rootDir>/test"],
  testMatch: ["**/*.spec.ts"],
  transform: { "^.+\\.ts$": ["@swc/jest", { jsc: { target: "es2023", parser: { syntax: "typescript" } }, module: { type: "commonjs" } }] },
  testTimeout: 60000,
  maxWorkers: 2,
  // Each file starts its own brokers and database; a file left running must not hold the run.
  forceExit: true,
  reporters: ["default", "<rootDir>/test/helpers/summary-reporter.js"],
};
