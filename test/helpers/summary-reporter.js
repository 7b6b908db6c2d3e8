// Writes the run's counts (from jest's aggregated results, the same as --json) to .test-results.json,
// so that .ci/run can print "N passed, N failed" while calling exactly `npm test`. The totals count
// every project (the e2e files run twice: on PostgreSQL and on embedded PGlite); `projects` has the
// same counts per project (displayName).
const fs = require("node:fs");
const path = require("node:path");

class SummaryReporter {
  onRunComplete(_contexts, results) {
    const projects = {};
    for (const file of results.testResults) {
      const name = (file.displayName && (file.displayName.name ?? file.displayName)) || "default";
      const p = (projects[name] ??= { passed: 0, failed: 0, skipped: 0, suites: 0, failedSuites: 0 });
      p.passed += file.numPassingTests;
      p.failed += file.numFailingTests + (file.testExecError ? 1 : 0);
      p.skipped += file.numPendingTests + file.numTodoTests;
      p.suites += 1;
      if (file.testExecError || file.numFailingTests > 0) p.failedSuites += 1;
    }
    const summary = {
      passed: results.numPassedTests,
      failed: results.numFailedTests + results.numRuntimeErrorTestSuites,
      skipped: results.numPendingTests + results.numTodoTests,
      suites: results.numTotalTestSuites,
      failedSuites: results.numFailedTestSuites,
      projects,
    };
    fs.writeFileSync(path.join(process.cwd(), ".test-results.json"), JSON.stringify(summary) + "\n");
  }
}
module.exports = SummaryReporter;
