// Lint: typescript-eslint's recommended rules, Prettier for layout, and the seams between services:
// a file under services/<name>/ may import another service only through its <name>.contract.ts.
import fs from "node:fs";
import js from "@eslint/js";
import prettier from "eslint-config-prettier";
import tseslint from "typescript-eslint";

// Every folder of services/ is a service (the names themselves are listed once, ALL_SERVICES in lib/config.ts).
const SERVICES = fs
  .readdirSync("services", { withFileTypes: true })
  .filter((e) => e.isDirectory())
  .map((e) => e.name);

/** In services/<own>/: every other service's files but its contract are off limits. */
const seams = SERVICES.map((own) => ({
  files: [`services/${own}/**/*.ts`],
  rules: {
    "no-restricted-imports": [
      "error",
      {
        patterns: SERVICES.filter((s) => s !== own).map((other) => ({
          regex: `(^|/)services/${other}/(?!${other}\\.contract$)|^\\.\\./${other}/(?!${other}\\.contract$)`,
          message: `Reach the ${other} service through ctx.call, its events, or services/${other}/${other}.contract.ts; never its internals.`,
        })),
      },
    ],
  },
}));

export default tseslint.config(
  { ignores: ["node_modules/**", "data/**", "coverage/**", "dist/**", ".dist-test-*/**", "clients/**", "**/*.js", "**/*.mjs", "**/*.cjs"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2023, sourceType: "module" },
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none" }],
      "@typescript-eslint/no-explicit-any": "error",
      "no-control-regex": "off",
      // A file a reader can hold in mind: past 400 lines it is two files.
      "max-lines": ["error", { max: 400 }],
    },
  },
  // Shared code and scripts reach a service only through its contract too. Tests and benches may
  // reach into a service: unit tests exercise its pure functions, benches time its parts.
  {
    files: ["app/**/*.ts", "lib/**/*.ts", "mixins/**/*.ts", "scripts/**/*.ts", "types/**/*.ts", "*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: SERVICES.map((other) => ({
            regex: `(^|/)services/${other}/(?!${other}\\.contract$)`,
            message: `Reach the ${other} service through its contract, services/${other}/${other}.contract.ts.`,
          })),
        },
      ],
    },
  },
  ...seams,
  // Tests read arbitrary JSON answers and documents. A spec file is one app and one database for
  // all its cases: splitting one in two doubles its start-up (app, database copy, module loading,
  // about 5 s under jest) for no reader's gain, so spec files are exempt from max-lines; helpers are not.
  { files: ["test/**/*.ts"], rules: { "@typescript-eslint/no-explicit-any": "off" } },
  { files: ["test/**/*.spec.ts"], rules: { "max-lines": "off" } },
  prettier,
);
