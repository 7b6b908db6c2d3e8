/** The contact filters as SQL (contacts.filters.ts): parameterised, escaped, refusing what is not a filter. */
import { likeEscape } from "../../lib/db/literals";
import { CONTACT_SORTS, type ContactFilters, type CustomFieldType } from "../../services/contacts/contacts.contract";
import { contactOrder, contactWhere } from "../../services/contacts/contacts.filters";

const NASTY = `O'Brien"; DROP TABLE contacts; -- /* $$ \\ */`;
const types = (entries: Array<[string, CustomFieldType]> = []) => new Map<string, CustomFieldType>(entries);
const where = (f: ContactFilters, custom = types()) => contactWhere("acme", f, custom);

/** The ApiError a call throws (its type and the paths of its field errors). */
function refusal(fn: () => unknown): { type: string; paths: string[] } {
  try {
    fn();
  } catch (err) {
    const e = err as { type: string; data?: { errors?: Array<{ path: string }> } };
    return { type: e.type, paths: (e.data?.errors ?? []).map((x) => x.path) };
  }
  throw new Error("expected a refusal");
}

describe("contactWhere", () => {
  it("puts the account first, as a named replacement, when there is no filter", () => {
    const w = where({});
    expect(w.sql).toBe("c.company_id = :companyId");
    expect(w.replacements).toEqual({ companyId: "acme" });
  });

  it("never inlines the account id", () => {
    const w = contactWhere(NASTY, {}, types());
    expect(w.sql).toBe("c.company_id = :companyId");
    expect(w.replacements.companyId).toBe(NASTY);
  });

  const everyFilter: Array<[string, ContactFilters, Record<string, unknown>]> = [
    ["fullName", { fullName: NASTY }, { fullName: likeEscape(NASTY) }],
    ["search", { search: NASTY }, { search: likeEscape(NASTY) }],
    ["isValid", { isValid: false }, { isValid: false }],
    ["isTest", { isTest: true }, { isTest: true }],
    ["phoneNumber", { phoneNumber: "+351 912 345 678" }, { phoneNumber: "+351912345678" }],
    ["email", { email: `  O'Brien@Example.COM ` }, { email: "o'brien@example.com" }],
    ["lastContactType", { lastContactType: "RCS" }, { lastContactType: "RCS" }],
    ["lastCampaignType", { lastCampaignType: "SMS" }, { lastCampaignType: "SMS" }],
    ["gender", { gender: "OTHER" }, { gender: "OTHER" }],
    ["listIds", { listIds: [3, 1] }, { listIds: [3, 1] }],
  ];

  it.each(everyFilter)("filters by %s through a named replacement, the account first", (name, f, expected) => {
    const w = where(f);
    expect(w.sql.startsWith("c.company_id = :companyId AND ")).toBe(true);
    expect(w.sql).toContain(`:${name}`);
    expect(w.replacements).toEqual({ companyId: "acme", ...expected });
  });

  it("keeps every user value out of the SQL text", () => {
    const w = where({ fullName: NASTY, search: NASTY, email: `${NASTY}@x.io`, "customFields.note": NASTY }, types([["note", "TEXT"]]));
    for (const piece of ["O'Brien", "DROP", "--", "/*", "$$", "\\"]) expect(w.sql).not.toContain(piece);
    expect(Object.values(w.replacements).some((v) => String(v).includes("DROP TABLE"))).toBe(true);
  });

  it("escapes LIKE's own characters so they match literally", () => {
    expect(likeEscape("50%_off\\now")).toBe("%50\\%\\_off\\\\now%");
    expect(where({ fullName: "100%" }).replacements.fullName).toBe("%100\\%%");
    expect(where({ search: "a_b" }).replacements.search).toBe("%a\\_b%");
  });

  it("combines filters with AND, the account first", () => {
    const w = where({ isTest: false, gender: "FEMALE", fullName: "Ana" });
    const parts = w.sql.split(" AND ");
    expect(parts[0]).toBe("c.company_id = :companyId");
    expect(parts).toEqual(expect.arrayContaining(["c.is_test = :isTest", "c.gender = :gender", "c.full_name ILIKE :fullName"]));
  });

  it("writes communicationSupported as a literal of the channel enum only", () => {
    expect(where({ communicationSupported: "WHATSAPP" }).sql).toBe("c.company_id = :companyId AND 'WHATSAPP' = ANY (c.communication_supported)");
    const bad = refusal(() => where({ communicationSupported: `SMS' OR '1'='1` as never }));
    expect(bad).toEqual({ type: "VALIDATION_ERROR", paths: ["communicationSupported"] });
  });

  it("refuses a phone number that is not one", () => {
    expect(refusal(() => where({ phoneNumber: "not a number" }))).toEqual({ type: "VALIDATION_ERROR", paths: ["phoneNumber"] });
  });

  it("matches a declared custom field as JSON containment, by its type", () => {
    const custom = types([
      ["tier", "TEXT"],
      ["score", "NUMBER"],
      ["vip", "BOOLEAN"],
      ["since", "DATE"],
    ]);
    const w = where({ "customFields.tier": NASTY, "customFields.score": "4.5", "customFields.vip": "true", "customFields.since": "2026-01-31" }, custom);
    expect(w.sql).toBe(
      "c.company_id = :companyId AND c.custom_fields @> CAST(:cf0 AS jsonb) AND c.custom_fields @> CAST(:cf1 AS jsonb)" +
        " AND c.custom_fields @> CAST(:cf2 AS jsonb) AND c.custom_fields @> CAST(:cf3 AS jsonb)",
    );
    expect(w.replacements).toEqual({
      companyId: "acme",
      cf0: JSON.stringify({ tier: NASTY }),
      cf1: JSON.stringify({ score: 4.5 }),
      cf2: JSON.stringify({ vip: true }),
      cf3: JSON.stringify({ since: "2026-01-31" }),
    });
  });

  it("rejects a custom field the account does not declare, and a value not of its type, naming each", () => {
    const bad = refusal(() =>
      where(
        { "customFields.unknown": "x", "customFields.score": "many", "customFields.vip": "yes" },
        types([
          ["score", "NUMBER"],
          ["vip", "BOOLEAN"],
        ]),
      ),
    );
    expect(bad).toEqual({ type: "VALIDATION_ERROR", paths: ["customFields.unknown", "customFields.score", "customFields.vip"] });
  });

  it("reports every bad filter at once", () => {
    const bad = refusal(() => where({ phoneNumber: "nope", "customFields.ghost": "1" }));
    expect(bad.paths).toEqual(["phoneNumber", "customFields.ghost"]);
  });
});

describe("contactOrder", () => {
  it.each(CONTACT_SORTS.map((s) => [s]))("sorts by %s, then by id in the same direction, nulls last", (sort) => {
    for (const dir of ["asc", "desc"] as const) {
      const sql = contactOrder(sort, dir);
      const DIR = dir.toUpperCase();
      expect(sql).toMatch(new RegExp(`^ORDER BY \\S.* ${DIR} NULLS LAST, c\\.id ${DIR}$`));
    }
  });

  it("sorts names case-insensitively, nameless contacts last", () => {
    expect(contactOrder("fullName", "asc")).toBe("ORDER BY lower(nullif(c.full_name, '')) ASC NULLS LAST, c.id ASC");
    expect(contactOrder("lastName", "desc")).toBe("ORDER BY lower(c.last_name) DESC NULLS LAST, c.id DESC");
  });
});
