// jest's own order (the files that failed last time first, then the longest first) needs the
// durations jest keeps in its cache, which is keyed by the project's path: a fresh clone (CI) has
// none, and jest falls back to file size, so a long file could start last and hold the run alone
// for its whole length. These are the seconds the longest files took in a full run (2-core
// machine, 4 workers); jest's cached figure wins wherever it has one, and a file with neither gets
// one from its size (jest runs files without a figure before all others, so every file needs one).
// A stale figure costs nothing but order. Keyed by project and path from the project's root.
const path = require("node:path");
const Sequencer = require("@jest/test-sequencer").default;

const ROOT = path.join(__dirname, "../..");
const SECONDS = {
  "main test/integration/faults.spec.ts": 54,
  "main test/integration/faults-kill.spec.ts": 50,
  "main test/e2e/webhook-delivery.spec.ts": 39,
  "main test/e2e/conformance.spec.ts": 39,
  "e2e-embedded test/e2e/api-walk.spec.ts": 37,
  "main test/integration/running.spec.ts": 36,
  "main test/integration/dist.spec.ts": 25,
  "main test/integration/profiles-rotate.spec.ts": 23,
  "main test/integration/exports-worker.spec.ts": 23,
  "main test/integration/campaigns-upstream-http.spec.ts": 21,
  "e2e-embedded test/e2e/campaigns-consent.spec.ts": 20,
  "main test/integration/repl.spec.ts": 19,
  "main test/e2e/exports.spec.ts": 19,
  "e2e-embedded test/e2e/exports.spec.ts": 19,
  "e2e-embedded test/e2e/contact-imports.spec.ts": 11,
  "main test/integration/notifier-kill.spec.ts": 18,
  "main test/integration/shutdown.spec.ts": 17,
  "e2e-embedded test/e2e/campaigns-preview.spec.ts": 17,
  "main test/e2e/campaigns-consent.spec.ts": 16,
  "main test/integration/readme-walk.spec.ts": 15,
  "e2e-embedded test/e2e/campaigns-send.spec.ts": 15,
};

class LongestFirst extends Sequencer {
  time(test) {
    const cached = super.time(test);
    if (cached != null) return cached;
    const seconds = SECONDS[`${test.context.config.displayName?.name ?? "main"} ${path.relative(ROOT, test.path)}`];
    // About a second per 5 KB of test file (at most 14 s: below the long files above).
    return seconds != null ? seconds * 1000 : Math.min(14_000, (test.context.hasteFS.getSize(test.path) ?? 0) / 5);
  }
}

module.exports = LongestFirst;
