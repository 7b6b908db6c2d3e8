/** GSM-7 / UCS-2 counting and splitting (lib/messaging/sms.ts), as carriers count (3GPP TS 23.038 / 23.040). */
import { encodingOf, smsInfo, splitSms } from "../../lib/messaging/sms";

describe("SMS encoding and parts", () => {
  it.each([
    ["", "GSM7", 0, 1],
    ["a".repeat(160), "GSM7", 160, 1],
    ["a".repeat(161), "GSM7", 161, 2],
    ["a".repeat(306), "GSM7", 306, 2],
    ["a".repeat(307), "GSM7", 307, 3],
    ["€".repeat(80), "GSM7", 160, 1],
    ["€".repeat(81), "GSM7", 162, 2],
    ["Olá, João! Ça va? ÄÖÜ ñ à è é ù ì ò Ç ß", "UCS2", 39, 1],
    ["ä ö ü é Ñ ¿ ¡ § ¥ £ @", "GSM7", 21, 1],
    ["ç".repeat(70), "UCS2", 70, 1],
    ["ç".repeat(71), "UCS2", 71, 2],
    ["ç".repeat(134), "UCS2", 134, 2],
    ["ç".repeat(135), "UCS2", 135, 3],
    ["🎉".repeat(35), "UCS2", 70, 1],
    ["🎉".repeat(36), "UCS2", 72, 2],
  ])("%j is %s, %d units, %d part(s)", (text, encoding, units, parts) => {
    expect(smsInfo(text)).toEqual({ encoding, units, parts });
  });

  it("counts the extension table as two septets and never splits one across parts", () => {
    const text = "a".repeat(152) + "€" + "b".repeat(10);
    const parts = splitSms(text);
    expect(parts[0]).toBe("a".repeat(152));
    expect(parts[1]!.startsWith("€")).toBe(true);
    expect(parts.join("")).toBe(text);
  });

  it("never splits a surrogate pair", () => {
    const text = "x".repeat(66) + "🎉" + "y".repeat(10);
    const parts = splitSms(text);
    expect(parts[0]).toBe("x".repeat(66));
    expect(parts.join("")).toBe(text);
    for (const p of parts) expect(p.length).toBeLessThanOrEqual(67);
  });

  it("keeps every part within 153 septets and the whole text in order", () => {
    const text = "{}[]~|^\\€ hello ".repeat(40);
    const parts = splitSms(text);
    for (const p of parts) expect(smsInfo(p).units).toBeLessThanOrEqual(153);
    expect(parts.join("")).toBe(text);
    expect(encodingOf(text)).toBe("GSM7");
  });

  it("handles a huge text in linear time", () => {
    // Ten times the text, about ten times the time (quadratic would be a hundred): the fastest of
    // three runs each, a ratio measured in the same process, so a busy machine slows both alike.
    const fastest = (n: number) => {
      const text = "€".repeat(n);
      let best = Infinity;
      for (let i = 0; i < 3; i++) {
        const started = process.hrtime.bigint();
        expect(smsInfo(text).parts).toBe(Math.ceil((2 * n) / 152));
        best = Math.min(best, Number(process.hrtime.bigint() - started));
      }
      return best;
    };
    const small = fastest(100_000);
    const large = fastest(1_000_000);
    expect(large / small).toBeLessThan(40);
  });
});
