// One line per finished test file, so that a long run shows how far it has come:
//   [12/167] PASS main test/e2e/auth.spec.ts  8.4 s
// The default reporter prints a file's result too, but without its place in the run, and its
// live status bar is not drawn when the output is not a terminal (CI). Written to stderr, as the
// default reporter writes.
const path = require("node:path");

class ProgressReporter {
  constructor(globalConfig) {
    this.rootDir = globalConfig.rootDir;
    this.done = 0;
    this.total = 0;
  }

  onRunStart(results) {
    this.total = results.numTotalTestSuites;
  }

  onTestFileResult(test, result) {
    this.done += 1;
    const failed = result.testExecError != null || result.numFailingTests > 0;
    const name = test.context.config.displayName;
    const project = (name && (name.name ?? name)) || "default";
    const ms = result.perfStats && result.perfStats.end > 0 ? result.perfStats.end - result.perfStats.start : 0;
    const file = path.relative(this.rootDir, result.testFilePath);
    process.stderr.write(`[${this.done}/${this.total}] ${failed ? "FAIL" : "PASS"} ${project} ${file}  ${(ms / 1000).toFixed(1)} s\n`);
  }
}
module.exports = ProgressReporter;
