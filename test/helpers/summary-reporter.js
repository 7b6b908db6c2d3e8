// Writes the run's counts (from jest's aggregated results, the same as --json) to .test-results.json,
// so that .ci/run can print "N passed, N failed" while calling exactly `npm test`.
const fs = require("node:fs");
const path = require("node:path");

class SummaryReporter {
  onRunComplete(_contexts, results) {
    const summary = {
      passed: results.numPassedTests,
      failed: results.numFailedTests + results.numRuntimeErrorTestSuites,
      skipped: results.numPendingTests + results.numTodoTests,
      suites: results.numTotalTestSuites,
      failedSuites: results.numFailedTestSuites,
    };
    fs.writeFileSync(path.join(process.cwd(), ".test-results.json"), JSON.stringify(summary) + "\n");
  }
}
module.exports = SummaryReporter;
