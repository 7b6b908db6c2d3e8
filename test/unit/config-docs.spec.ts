/**
 * docs/configuration.md and .env.example follow lib/config.ts: every variable the product reads is
 * documented with its default, no row names a variable that does not exist, and .env.example lists
 * every variable (commented out) with that same default.
 */
import fs from "node:fs";
import path from "node:path";
import { ALL_SERVICES, VARIABLES } from "../../lib/config";

const ROOT = path.join(__dirname, "../..");
const doc = fs.readFileSync(path.join(ROOT, "docs/configuration.md"), "utf8");
const names = Object.keys(VARIABLES) as Array<keyof typeof VARIABLES>;
const defaultOf = (name: keyof typeof VARIABLES) => (VARIABLES[name] as { default: unknown }).default;

/** The table's rows: the variables each names (a row may name two, `NATS_USER`, `NATS_PASSWORD`) and its default cell. */
const rows = doc
  .split("\n")
  .filter((l) => /^\| `[A-Z_]+`/.test(l))
  .map((l) => {
    const [vars, def] = l.split(" | ");
    return { vars: [...vars!.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((m) => m[1]!), def: def ?? "" };
  });

it("documents every variable of lib/config.ts, and only those", () => {
  const documented = rows.flatMap((r) => r.vars);
  expect(names.filter((n) => !documented.includes(n))).toEqual([]);
  expect(documented.filter((n) => !names.includes(n as never))).toEqual([]);
  expect(new Set(documented).size).toBe(documented.length);
});

it("gives each variable's default as lib/config.ts has it", () => {
  for (const row of rows) {
    for (const name of row.vars) {
      const d = defaultOf(name as keyof typeof VARIABLES);
      if (d === null || name === "SERVICES") continue; // unset: the row says what that means
      expect({ name, def: row.def }).toEqual({ name, def: expect.stringContaining(`\`${String(d)}\``) });
    }
  }
  // SERVICES: all of them, by name.
  const services = rows.find((r) => r.vars.includes("SERVICES"))!;
  expect(services.def).toContain("all");
  expect(doc).toContain(ALL_SERVICES.map((s) => `\`${s}\``).join(", "));
});

it("has .env.example list every variable, commented out, with its default", () => {
  const example = fs.readFileSync(path.join(ROOT, ".env.example"), "utf8");
  const lines = example.split("\n").filter((l) => /^#? ?[A-Z][A-Z0-9_]+=/.test(l));
  const parsed = new Map(
    lines.map((l) => {
      const [name, ...value] = l.replace(/^# ?/, "").split("=");
      return [name!, value.join("=")];
    }),
  );
  expect([...parsed.keys()].sort()).toEqual([...names].sort());
  for (const name of names) {
    const d = defaultOf(name);
    expect({ name, value: parsed.get(name) }).toEqual({ name, value: d === null ? "" : String(d) });
  }
  // Nothing is set by copying it: every variable line is a comment.
  expect(lines.every((l) => l.startsWith("#"))).toBe(true);
});
