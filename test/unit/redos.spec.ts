/**
 * Every pattern that sees a partner's or an upstream's text, run against hostile text of up to
 * 1 MiB: long runs of the characters a pattern repeats, ended by one it refuses. A pattern that
 * backtracks (two ways to match the same run) takes seconds on a few KiB and hours on 1 MiB, so
 * each input grows from 16 KiB to 1 MiB and every single match must end well under a second.
 */
import * as authSchemas from "../../services/auth/auth.schemas";
import * as contactsContract from "../../services/contacts/contacts.contract";
import * as fieldSchemas from "../../services/contacts/contacts.fields.schemas";
import * as importSchemas from "../../services/contacts/contacts.imports.schemas";
import * as contactSchemas from "../../services/contacts/contacts.schemas";
import { buildRow, EMAIL_RE, MAX_CELL_TEXT, resolveColumns, targetOf, type Cell } from "../../services/contacts/contacts.import-rows";
import { customValueError, NUMBER_RE, parseCustomFilter, toE164 } from "../../services/contacts/contacts.normalize";
import { VCARD_BEGIN, VCARD_END } from "../../services/contacts/contacts.worker";
import * as exportSchemas from "../../services/exports/exports.schemas";
import * as notifierSchemas from "../../services/notifier/notifier.schemas";
import * as trackingContract from "../../services/tracking/tracking.contract";
import * as trackingSchemas from "../../services/tracking/tracking.schemas";
import { checkText } from "../../lib/http/text";
import { uploadedFileSchema } from "../../lib/http/upload";

/**
 * The longest a single match may take: linear work on 1 MiB is milliseconds (a few hundred on a
 * loaded 2-core CI machine), quadratic is tens of seconds at 64 KiB and hours at 1 MiB.
 */
const BUDGET_MS = 2000;
/** Small sizes first: a quadratic pattern is already over budget at 16 KiB, so a regression fails fast. */
const SIZES = [16 << 10, 64 << 10, 1 << 20];

/** Runs the patterns repeat, what may come before them, and characters that make a match fail. */
const PUMPS = ["1", "a", "A", " ", "\t", ".", "-", "_", "+", "0.", "1e", "a.", "a-", "a1", "a_", "@", "a@", ":", "/", "\u00e9"];
const PREFIXES = ["+", "-", "a@", "pgw_", "customFields.", "BEGIN:VCARD", "00"];
const TRIPLES: Array<[string, string, string]> = [
  ...PUMPS.flatMap((pump): Array<[string, string, string]> => [
    ["", pump, "x"],
    ["", pump, "\u0000"],
  ]),
  ...PREFIXES.flatMap((prefix): Array<[string, string, string]> => [
    [prefix, "1", "x"],
    [prefix, "a", "!"],
    [prefix, "a.", "-"],
    [prefix, " ", "x"],
  ]),
];

/** A hostile text of about `size` characters: prefix, a pumped run, a character that makes the match fail. */
const hostile = (prefix: string, pump: string, end: string, size: number) => prefix + pump.repeat(Math.ceil(size / pump.length)) + end;
const made = new Map<string, string>();
const text = (prefix: string, pump: string, end: string, size: number) => {
  const key = JSON.stringify([prefix, pump, end, size]);
  let s = made.get(key);
  if (s === undefined) made.set(key, (s = hostile(prefix, pump, end, size)));
  return s;
};

/** Runs `fn` on every hostile text, 16 KiB, 64 KiB, then 1 MiB; fails at the first too slow, naming it. */
function expectLinear(name: string, fn: (s: string) => unknown) {
  for (const [prefix, pump, end] of TRIPLES)
    for (const size of SIZES) {
      const s = text(prefix, pump, end, size);
      const t = process.hrtime.bigint();
      fn(s);
      const ms = Number(process.hrtime.bigint() - t) / 1e6;
      if (ms > BUDGET_MS)
        throw new Error(`${name} took ${ms.toFixed(0)} ms on ${JSON.stringify(prefix)} + ${JSON.stringify(pump)} x ${size} + ${JSON.stringify(end)}`);
    }
}

/** Every JSON-schema `pattern` and `patternProperties` key in the values given (ajv compiles them with the u flag). */
function schemaPatterns(...modules: unknown[]): string[] {
  const found = new Set<string>();
  const seen = new Set<unknown>();
  const walk = (v: unknown) => {
    if (!v || typeof v !== "object" || seen.has(v)) return;
    seen.add(v);
    const o = v as Record<string, unknown>;
    if (typeof o.pattern === "string") found.add(o.pattern);
    if (o.patternProperties && typeof o.patternProperties === "object") for (const k of Object.keys(o.patternProperties)) found.add(k);
    for (const child of Object.values(o)) walk(child);
  };
  modules.forEach(walk);
  return [...found];
}

describe("patterns on partner and upstream text", () => {
  it("reads a number without backtracking over a long run of digits", () => {
    expectLinear("NUMBER_RE", (s) => NUMBER_RE.test(s));
    expectLinear("parseCustomFilter NUMBER", (s) => parseCustomFilter("NUMBER", s));
  });

  it("still reads every form of number it read before", () => {
    for (const ok of ["0", "-1", "1.", "1.5", ".5", "-.5", "1e3", "1E-3", "2.5e+10", "007"]) expect(NUMBER_RE.test(ok)).toBe(true);
    for (const bad of ["", "-", ".", "1..2", "1e", "e3", "1.2.3", "+1", "1 ", "0x10", "1,5"]) expect(NUMBER_RE.test(bad)).toBe(false);
    expect(parseCustomFilter("NUMBER", "12.50")).toBe(12.5);
    expect(parseCustomFilter("NUMBER", `1${"0".repeat(2000)}`)).toBeUndefined();
  });

  it("checks dates, phone numbers and emails in bounded time", () => {
    expectLinear("customValueError DATE", (s) => customValueError("DATE", s));
    expectLinear("parseCustomFilter DATE", (s) => parseCustomFilter("DATE", s));
    expectLinear("toE164", (s) => toE164(s));
    expectLinear("EMAIL_RE (as run: at most 254 characters)", (s) => s.length <= 254 && EMAIL_RE.test(s));
    // Short hostile emails: every prefix of the pumped runs up to the 254 the import lets through.
    for (const pump of PUMPS)
      for (const size of [60, 120, 250]) {
        const t = Date.now();
        EMAIL_RE.test(hostile("a@", pump, "!", size));
        expect(Date.now() - t).toBeLessThan(BUDGET_MS);
      }
  });

  it("refuses a cell longer than the limit before any pattern sees it", () => {
    const columns = ["phoneNumber", "email", "firstName", "gender", "isTest", "customFields.n", "customFields.t", "customFields.d", "customFields.b"];
    const types = new Map<string, contactsContract.CustomFieldType>([
      ["n", "NUMBER"],
      ["t", "TEXT"],
      ["d", "DATE"],
      ["b", "BOOLEAN"],
    ]);
    expectLinear("buildRow", (s) => {
      for (let i = 0; i < columns.length; i++) {
        const cells: Cell[] = columns.map(() => undefined);
        cells[i] = s;
        if (i !== 0) cells[0] = "+351912345678";
        buildRow(1, cells, columns, types);
      }
    });
    const huge = `${"1".repeat(1 << 20)}x`;
    expect(huge.length).toBeGreaterThan(MAX_CELL_TEXT);
    expect(buildRow(7, ["+351912345678", huge], ["phoneNumber", "customFields.n"], types)).toEqual({
      row: 7,
      message: "customFields.n must be a number",
    });
  });

  it("matches header names and vCard lines in bounded time", () => {
    expectLinear("targetOf", (s) => targetOf(s, ["tier", "first_name"], true));
    expectLinear("resolveColumns", (s) => {
      try {
        resolveColumns([s, "email"], { [s]: null }, ["tier"]);
      } catch {
        // a header the mapping does not name is an error; only the time counts here
      }
    });
    expectLinear("VCARD_BEGIN", (s) => VCARD_BEGIN.test(s));
    expectLinear("VCARD_END", (s) => VCARD_END.test(s));
  });

  it("checks JSON text for NUL and lone surrogates in bounded time", () => {
    expectLinear("checkText", (s) => {
      try {
        checkText({ [s.slice(0, 1000)]: s, list: [s] });
      } catch {
        // NUL is refused; only the time counts here
      }
    });
  });

  const patterns = schemaPatterns(
    authSchemas,
    contactsContract,
    fieldSchemas,
    importSchemas,
    contactSchemas,
    exportSchemas,
    notifierSchemas,
    trackingContract,
    trackingSchemas,
    uploadedFileSchema,
  );

  it("finds the schemas' patterns", () => {
    expect(patterns.length).toBeGreaterThanOrEqual(8);
    expect(patterns).toContain(contactsContract.UUID);
    expect(patterns).toContain(contactSchemas.CUSTOM_KEY);
  });

  // ajv does not promise to check maxLength before pattern (with allErrors it checks both): every
  // pattern must be linear on text of any length.
  it.each(patterns)("schema pattern %s is linear on 1 MiB", (p) => {
    const re = new RegExp(p, "u");
    expectLinear(p, (s) => re.test(s));
  });
});
