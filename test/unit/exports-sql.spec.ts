/**
 * The exports' SQL inlines the filters' values (COPY takes no parameters): every value must stay
 * inside one literal. Checked here on the text; test/integration/exports-sql.spec.ts runs the built
 * statements against a database with the same hostile values.
 */
import { Sequelize } from "sequelize";
import { sqlLiteral } from "../../lib/db/literals";
import { inlineReplacements } from "../../services/contacts/contacts.export";
import { NASTY } from "../helpers/nasty";

describe("sqlLiteral", () => {
  it.each(NASTY.map((v) => [v]))("keeps %j inside one literal", (value) => {
    const lit = sqlLiteral(value, "text");
    // One literal: optional E prefix, one quoted string whose inner quotes are all doubled, then the cast.
    expect(lit).toMatch(/^ ?E?'(?:[^']|'')*'::text$/s);
    const inner = lit.replace(/^ ?E?'/, "").replace(/'::text$/, "");
    // Backslashes are doubled only in an E'' literal (where they escape).
    const unescaped = lit.trimStart().startsWith("E") ? inner.replace(/''/g, "'").replace(/\\\\/g, "\\") : inner.replace(/''/g, "'");
    expect(unescaped).toBe(value);
  });

  it("writes finite numbers bare, anything else as a quoted literal", () => {
    expect(sqlLiteral(3, "smallint")).toBe("3::smallint");
    expect(sqlLiteral(Number.NaN, "smallint")).toBe("'NaN'::smallint");
    expect(sqlLiteral("3; DROP TABLE messages", "smallint")).toBe("'3; DROP TABLE messages'::smallint");
  });

  it("writes arrays as an ARRAY of literals", () => {
    expect(sqlLiteral(["SMS", "R'CS"], "text[]")).toBe("ARRAY['SMS', 'R''CS']::text[]");
  });
});

describe("inlineReplacements (the contacts export's filters, escaped by sequelize.escape)", () => {
  // escape needs the dialect only: this instance never connects.
  const sequelize = new Sequelize("postgres://nobody@127.0.0.1:1/none", { dialect: "postgres", logging: false });
  const escape = (v: unknown) => sequelize.escape(v as string);
  afterAll(() => sequelize.close());

  it.each([...NASTY, "nul\u0000byte", "\\", "'", "\\'"].map((v) => [v]))("keeps %j inside one literal", (value) => {
    const sql = inlineReplacements("c.last_name = :v AND c.company_id = :companyId", { v: value, companyId: "acme" }, escape);
    const lit = sql.slice("c.last_name = ".length, sql.length - " AND c.company_id = 'acme'".length);
    expect(sql.endsWith(" AND c.company_id = 'acme'")).toBe(true);
    // One standard-conforming literal: quotes doubled, backslashes as they are, NUL written as the two characters \0.
    expect(lit).toMatch(/^'(?:[^']|'')*'$/s);
    expect(lit).toBe(`'${value.replace(/'/g, "''").replace(/\u0000/g, "\\0")}'`);
  });

  it("leaves placeholders inside literals, quoted identifiers and casts alone", () => {
    expect(inlineReplacements(`SELECT ':v', 'a'':v', ":v", x::text, (:v), :v::int`, { v: 7 }, escape)).toBe(`SELECT ':v', 'a'':v', ":v", x::text, (7), 7::int`);
  });

  it("writes an array as a list of literals (IN (:ids)) and booleans bare", () => {
    expect(inlineReplacements("id IN (:ids) AND ok = :ok", { ids: [1, 2], ok: true }, (v) => (typeof v === "boolean" ? String(v) : escape(v)))).toBe(
      "id IN (1, 2) AND ok = true",
    );
    expect(inlineReplacements("n IN (:names)", { names: ["a'b", "c"] }, escape)).toBe("n IN ('a''b', 'c')");
  });

  it("refuses a placeholder with no value", () => {
    expect(() => inlineReplacements("a = :missing", {}, escape)).toThrow(/:missing/);
  });
});
