// Lint: typescript-eslint's recommended rules, Prettier for layout, and the seams between services:
// a file under services/<name>/ may import another service only through its <name>.contract.ts.
import js from "@eslint/js";
import prettier from "eslint-config-prettier";
import tseslint from "typescript-eslint";

const SERVICES = ["auth", "campaigns", "contacts", "exports", "gateway", "inbox", "media", "notifier", "profiles", "simulator", "tracking"];

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
    },
  },
  // Shared code and scripts reach a service only through its contract too. Tests and benches may
  // reach into a service: unit tests exercise its pure functions, benches time its parts.
  {
    files: ["lib/**/*.ts", "mixins/**/*.ts", "scripts/**/*.ts", "types/**/*.ts", "*.ts"],
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
  // Tests read arbitrary JSON answers and documents.
  { files: ["test/**/*.ts"], rules: { "@typescript-eslint/no-explicit-any": "off" } },
  prettier,
);
