/** Campaign placeholders (services/campaigns/campaigns.text.ts): parsing, fallbacks, rendering, and hostile inputs bounded. */
import { characters, fits, MAX_FALLBACK, MAX_PLACEHOLDERS, parseText, render, TextError } from "../../services/campaigns/campaigns.text";

const refusal = (text: string) => {
  try {
    parseText(text);
  } catch (err) {
    expect(err).toBeInstanceOf(TextError);
    return (err as TextError).message;
  }
  throw new Error(`accepted: ${text.slice(0, 50)}`);
};

describe("placeholders", () => {
  it("parses names, custom fields and fallbacks, and renders them", () => {
    const p = parseText("Hi {{ firstName | there }} {{lastName}}, tier {{customFields.tier|basic}}.");
    expect(p.customKeys).toEqual(["tier"]);
    expect(render(p, { firstName: "Ana", lastName: "Silva", customFields: { tier: "gold" } }, 1000)).toBe("Hi Ana Silva, tier gold.");
    expect(render(p, { firstName: null, lastName: "", customFields: {} }, 1000)).toBe("Hi there , tier basic.");
    expect(render(p, { firstName: "Ana", customFields: { tier: 3 } }, 1000)).toBe("Hi Ana , tier 3.");
  });

  it("keeps single braces and stray closing braces as text", () => {
    const p = parseText("a { b } c }} d {x}");
    expect(render(p, {}, 100)).toBe("a { b } c }} d {x}");
  });

  it.each([
    ["Hi {{nickname}}", /unknown placeholder/],
    ["Hi {{}}", /unknown placeholder/],
    ["Hi {{customFields.}}", /unknown placeholder/],
    ["Hi {{customFields.9x}}", /unknown placeholder/],
    ["Hi {{customFields.a.b}}", /unknown placeholder/],
    ["Hi {{firstName", /unterminated/],
    ["Hi {{first{{Name}}}}", /nested/],
    ["Hi {{firstName|{x}}}", /nested/],
    [`Hi {{firstName|${"x".repeat(MAX_FALLBACK + 1)}}}`, /fallback longer/],
    [`{{firstName${" ".repeat(300)}}}`, /unterminated/],
    ["{{firstName}}".repeat(MAX_PLACEHOLDERS + 1), /more than/],
  ])("refuses %j", (text, why) => {
    expect(refusal(text)).toMatch(why);
  });

  it("bounds hostile texts: huge, brace-heavy, regex-DoS-shaped", () => {
    const started = Date.now();
    refusal("{{".repeat(500_000));
    refusal("{".repeat(1_000_000) + "{{");
    expect(render(parseText("}".repeat(1_000_000)), {}, 10)).toBe("}".repeat(11));
    refusal(`{{${"|".repeat(150)}`);
    refusal(`{{firstName|${"a|".repeat(100_000)}}}`);
    expect(parseText("{{firstName}} ".repeat(50)).pieces.length).toBe(100);
    expect(Date.now() - started).toBeLessThan(3000);
  });

  it("counts characters as code points everywhere: 1000 emoji fit SMS's 1600 and are rendered whole", () => {
    const emoji = "🎉".repeat(1000);
    expect(characters(emoji)).toBe(1000);
    expect(characters("a\ud800b")).toBe(3); // a lone surrogate is one character
    const out = render(parseText(emoji), {}, 1600);
    expect(out).toBe(emoji);
    expect(fits(out, 1600)).toBe(true);
  });

  it("never cuts a text placeholder values push past the maximum: it comes back longer (bounded) and does not fit", () => {
    const p = parseText("{{customFields.note}}");
    const long = render(p, { customFields: { note: "x".repeat(5000) } }, 1600);
    expect(long).toHaveLength(1601);
    expect(fits(long, 1600)).toBe(false);
    const out = render(p, { customFields: { note: "a" + "🎉".repeat(10) } }, 4);
    expect(out).toBe("a🎉🎉🎉🎉");
    expect(fits(out, 4)).toBe(false);
    expect(fits(render(p, { customFields: { note: "a🎉🎉🎉" } }, 4), 4)).toBe(true);
  });
});
