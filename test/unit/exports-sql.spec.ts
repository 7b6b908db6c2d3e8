/**
 * The exports' SQL inlines the filters' values (COPY takes no parameters): every value must stay
 * inside one literal. Checked here on the text; test/integration/exports-sql.spec.ts runs the built
 * statements against a database with the same hostile values.
 */
import { sqlLiteral } from "../../services/exports/exports.sql";
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
