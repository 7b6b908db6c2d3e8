/**
 * The import row builder (services/contacts/contacts.import-rows.ts), pure: which column feeds which
 * field (headers matched case-insensitively, the partner's mapping first), and each cell checked and
 * normalised by the rules of POST /contacts, errors per row naming every bad field.
 */
import { buildRow, isRowError, resolveColumns, targetOf, type Cell } from "../../services/contacts/contacts.import-rows";
import type { CustomFieldType } from "../../services/contacts/contacts.contract";

const CUSTOM: ReadonlyMap<string, CustomFieldType> = new Map([
  ["tier", "TEXT"],
  ["score", "NUMBER"],
  ["vip", "BOOLEAN"],
  ["born", "DATE"],
]);
const KEYS = [...CUSTOM.keys()];

/** Builds row 1 from `{ target: cell }`. */
const row = (cells: Record<string, Cell>) => buildRow(1, Object.values(cells), Object.keys(cells), CUSTOM);

describe("targetOf: header and mapping names", () => {
  it.each([
    ["firstname", "firstName"],
    ["PHONENUMBER", "phoneNumber"],
    ["  email ", "email"],
    ["isTest", "isTest"],
    ["Tier", "customFields.tier"],
    ["customFields.SCORE", "customFields.score"],
  ])("matches %j to %s, case-insensitively", (name, target) => {
    expect(targetOf(name, KEYS, false)).toBe(target);
    expect(targetOf(name, KEYS, true)).toBe(target);
  });

  it("ignores spaces, underscores, dots and dashes in headers only", () => {
    expect(targetOf("First Name", KEYS, true)).toBe("firstName");
    expect(targetOf("phone_number", KEYS, true)).toBe("phoneNumber");
    expect(targetOf("e-mail", KEYS, true)).toBe("email");
    expect(targetOf("First Name", KEYS, false)).toBeNull();
  });

  it("answers null for a name that is no field, and for one that loosely matches two", () => {
    expect(targetOf("Notes", KEYS, true)).toBeNull();
    expect(targetOf("customFields.nope", KEYS, false)).toBeNull();
    expect(targetOf("First Name", ["first-name"], true)).toBeNull(); // firstName or customFields.first-name
    expect(targetOf("first-name", ["first-name"], true)).toBe("customFields.first-name"); // exact wins
  });
});

describe("resolveColumns", () => {
  it("maps headers to fields, unknown columns to null", () => {
    expect(resolveColumns(["Phone Number", "EMAIL", "Notes", "tier", ""], null, KEYS)).toEqual(["phoneNumber", "email", null, "customFields.tier", null]);
  });

  it("lets the mapping win over headers (matched exactly, then case-insensitively); null ignores a column", () => {
    const columns = resolveColumns(
      ["Mobile", "E-mail address", "email", "First Name"],
      { mobile: "phoneNumber", "E-mail address": "email", email: null },
      KEYS,
    );
    expect(columns).toEqual(["phoneNumber", "email", null, "firstName"]);
  });

  it("maps a mapping value naming no declared field to no column", () => {
    expect(resolveColumns(["email", "X"], { X: "customFields.nope" }, KEYS)).toEqual(["email", null]);
  });

  it("reads header cells of any type as text", () => {
    expect(resolveColumns(["email", 42, true, undefined], null, KEYS)).toEqual(["email", null, null, null]);
  });

  it("ends the import for a mapped column the header lacks, two columns feeding one field, or no phone or email column", () => {
    expect(() => resolveColumns(["email"], { Mobile: "phoneNumber" }, KEYS)).toThrow(/"Mobile"/);
    expect(() => resolveColumns(["email", "Email"], null, KEYS)).toThrow(/"email" and "Email" both feed email/);
    expect(() => resolveColumns(["Mobile", "phone"], { Mobile: "phoneNumber", phone: "phoneNumber" }, KEYS)).toThrow(/both feed phoneNumber/);
    expect(() => resolveColumns(["firstName", "lastName"], null, KEYS)).toThrow(/no column for phoneNumber or email.*"firstName", "lastName"/);
    expect(() => resolveColumns([], null, KEYS)).toThrow(/its header: empty/);
  });
});

describe("buildRow: normalisation", () => {
  it("trims, writes the phone in E.164, lower-cases the email, upper-cases the gender", () => {
    expect(row({ firstName: "  Ana ", lastName: "Silva", phoneNumber: "+351 912 345 678", email: " Ana@Example.COM ", gender: "female" })).toEqual({
      row: 1,
      firstName: "Ana",
      lastName: "Silva",
      phone: "+351912345678",
      email: "ana@example.com",
      gender: "FEMALE",
    });
    expect(row({ phoneNumber: "00351912345678" })).toEqual({ row: 1, phone: "+351912345678" });
  });

  it("leaves out the fields of empty cells and of columns that feed nothing", () => {
    const r = buildRow(7, ["a@x.pt", "", "   ", undefined, "ignored"], ["email", "firstName", "lastName", "gender", null], CUSTOM);
    expect(r).toEqual({ row: 7, email: "a@x.pt" });
  });

  it.each([
    ["yes", true],
    ["TRUE", true],
    ["1", true],
    [true, true],
    [1, true],
    ["no", false],
    ["n", false],
    ["0", false],
    [false, false],
    [0, false],
  ] as Array<[Cell, boolean]>)("reads isTest %j as %s", (cell, value) => {
    expect(row({ email: "a@x.pt", isTest: cell })).toMatchObject({ isTest: value });
  });
});

describe("buildRow: custom fields by their declared type", () => {
  it("types text and spreadsheet cells", () => {
    expect(
      row({ email: "a@x.pt", "customFields.tier": " gold ", "customFields.score": "12.5", "customFields.vip": "no", "customFields.born": "1990-02-03" }),
    ).toEqual({
      row: 1,
      email: "a@x.pt",
      customFields: { tier: "gold", score: 12.5, vip: false, born: "1990-02-03" },
    });
    expect(
      row({ email: "a@x.pt", "customFields.tier": 5, "customFields.score": 7, "customFields.vip": true, "customFields.born": new Date(Date.UTC(2020, 4, 17)) }),
    ).toMatchObject({ customFields: { tier: "5", score: 7, vip: true, born: "2020-05-17" } });
    expect(row({ email: "a@x.pt", "customFields.score": "-1e3" })).toMatchObject({ customFields: { score: -1000 } });
  });

  it.each([
    ["a NUMBER that is text", "customFields.score", "many", "customFields.score must be a number"],
    ["a NUMBER out of range", "customFields.score", "1e999", "customFields.score must be a number"],
    ["a NUMBER cell that is NaN", "customFields.score", Number.NaN, "customFields.score must be a number"],
    ["a BOOLEAN that is neither", "customFields.vip", "maybe", "customFields.vip must be true or false"],
    ["a BOOLEAN cell of 2", "customFields.vip", 2, "customFields.vip must be true or false"],
    ["a DATE that does not exist", "customFields.born", "1990-02-30", "customFields.born must be a date YYYY-MM-DD"],
    ["a DATE in another format", "customFields.born", "03/02/1990", "customFields.born must be a date YYYY-MM-DD"],
    ["an invalid DATE cell", "customFields.born", new Date(Number.NaN), "customFields.born must be a date YYYY-MM-DD"],
    ["a TEXT of 2001 characters", "customFields.tier", "x".repeat(2001), "customFields.tier must be a text of at most 2000 characters"],
    ["an undeclared key", "customFields.nope", "x", "customFields.nope is not a custom field of this account"],
  ] as Array<[string, string, Cell, string]>)("refuses %s", (_name, target, cell, message) => {
    expect(row({ email: "a@x.pt", [target]: cell })).toEqual({ row: 1, message });
  });

  it("keeps a text of exactly 2000 characters", () => {
    expect(row({ email: "a@x.pt", "customFields.tier": "x".repeat(2000) })).toMatchObject({ customFields: { tier: "x".repeat(2000) } });
  });
});

describe("buildRow: errors per row", () => {
  it("names every bad field of the row, in column order, and keeps nothing of it", () => {
    const r = buildRow(3, ["robot", "not-an-email", "12345", "perhaps"], ["gender", "email", "phoneNumber", "isTest"], CUSTOM);
    expect(isRowError(r)).toBe(true);
    expect(Object.keys(r)).toEqual(["row", "message"]);
    const parts = (r as { row: number; message: string }).message.split("; ");
    expect((r as { row: number }).row).toBe(3);
    expect(parts).toEqual([
      "gender must be one of MALE, FEMALE, OTHER",
      "email must be a valid email address",
      expect.stringMatching(/^phoneNumber must be a valid phone number/),
      "isTest must be true or false",
    ]);
  });

  it("refuses a row with neither phone nor email", () => {
    expect(row({ firstName: "Ana", gender: "MALE" })).toEqual({ row: 1, message: "a phone number or an email is required" });
  });

  it("refuses a phone without its country code, as POST /contacts does", () => {
    expect(row({ phoneNumber: "912345678" })).toEqual({ row: 1, message: expect.stringMatching(/^phoneNumber must be a valid phone number/) });
  });

  it("refuses NUL and unpaired surrogates, and keeps other Unicode", () => {
    expect(row({ email: "a@x.pt", firstName: "Bad\u0000Name" })).toEqual({
      row: 1,
      message: "firstName must not contain NUL or unpaired surrogate characters",
    });
    expect(row({ email: "a@x.pt", lastName: "x\ud800" })).toEqual({ row: 1, message: "lastName must not contain NUL or unpaired surrogate characters" });
    expect(row({ email: "a@x.pt", lastName: "José 😀 中文" })).toMatchObject({ lastName: "José 😀 中文" });
  });

  it("is a row, not an error, when every cell is good", () => {
    expect(isRowError(buildRow(1, ["a@x.pt"], ["email"], CUSTOM))).toBe(false);
  });
});

describe("buildRow: formula-like and huge cells", () => {
  it("keeps formula-like text as text (exports neutralise it, imports store what was written)", () => {
    expect(row({ email: "a@x.pt", firstName: '=HYPERLINK("http://evil")', lastName: "@SUM(A1)", "customFields.tier": "+cmd|' /C calc'!A0" })).toEqual({
      row: 1,
      email: "a@x.pt",
      firstName: '=HYPERLINK("http://evil")',
      lastName: "@SUM(A1)",
      customFields: { tier: "+cmd|' /C calc'!A0" },
    });
  });

  it("refuses formula-like cells where a typed value belongs", () => {
    expect(row({ email: "=1+2" })).toEqual({ row: 1, message: "email must be a valid email address" });
    expect(row({ phoneNumber: "=1+351912345678" })).toEqual({ row: 1, message: expect.stringMatching(/^phoneNumber must be/) });
    expect(row({ email: "a@x.pt", "customFields.score": "=1+2" })).toEqual({ row: 1, message: "customFields.score must be a number" });
  });

  it("refuses names over 200 characters, and keeps one of exactly 200", () => {
    expect(row({ email: "a@x.pt", firstName: "n".repeat(200) })).toMatchObject({ firstName: "n".repeat(200) });
    expect(row({ email: "a@x.pt", firstName: "n".repeat(201) })).toEqual({ row: 1, message: "firstName must be at most 200 characters" });
  });

  it("refuses huge cells quickly, as that row's error", () => {
    const mib = "9".repeat(1024 * 1024);
    const started = process.hrtime.bigint();
    const r = buildRow(5, [`+351${mib}`, `${mib}@x.pt`, mib], ["phoneNumber", "email", "lastName"], CUSTOM);
    expect(isRowError(r) && r.row).toBe(5);
    expect((r as { message: string }).message).toMatch(
      /^phoneNumber must be .*; email must be a valid email address; lastName must be at most 200 characters$/,
    );
    // Length checks come before parsing: a megabyte cell costs no parse of a megabyte.
    expect(Number(process.hrtime.bigint() - started) / 1e6).toBeLessThan(2000);
  });
});
