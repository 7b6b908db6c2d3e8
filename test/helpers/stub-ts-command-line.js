// Stands in for @rushstack/ts-command-line under jest (jest.config.js moduleNameMapper). umzug's
// index loads its command-line interface, and with it @rushstack's parser and terminal packages,
// though the product only uses the Umzug class (lib/db/db.ts). Jest evaluates every module again for
// each test file, and those packages cost about 0.8 s of CPU per file; this stub costs nothing.
// umzug's CLI classes extend the two below when its module loads; using the CLI under jest fails.
class Unavailable {
  constructor() {
    throw new Error("umzug's command-line interface is stubbed under jest (test/helpers/stub-ts-command-line.js)");
  }
}
class CommandLineAction extends Unavailable {}
class CommandLineParser extends Unavailable {}
module.exports = { CommandLineAction, CommandLineParser };
