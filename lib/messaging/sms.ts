/**
 * SMS encoding and parts (3GPP TS 23.038 / 23.040), once for every service that needs it: the
 * campaign preview counts parts, the simulator splits long messages as carriers do.
 * GSM-7: 160 septets in one part, 153 per part of a concatenated message; a character of the
 * extension table (`^{}\[~]|€` and form feed) takes two septets and is never split across parts.
 * Anything outside GSM-7 makes the whole message UCS-2: 70 UTF-16 units, 67 per part; a surrogate
 * pair (an emoji) is never split. Linear in the text, no regular expression.
 */
export type SmsEncoding = "GSM7" | "UCS2";

export const GSM7_BASIC = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";
export const GSM7_EXTENSION = "^{}\\[~]|€\f";
const BASIC = new Set(GSM7_BASIC);
const EXTENSION = new Set(GSM7_EXTENSION);

export const LIMITS = { GSM7: { single: 160, part: 153 }, UCS2: { single: 70, part: 67 } } as const;

export interface SmsInfo {
  encoding: SmsEncoding;
  /** Septets (GSM-7) or UTF-16 units (UCS-2). */
  units: number;
  parts: number;
}

/** GSM7 when every character is in the GSM-7 basic or extension table, else UCS2. */
export function encodingOf(text: string): SmsEncoding {
  for (const ch of text) if (!BASIC.has(ch) && !EXTENSION.has(ch)) return "UCS2";
  return "GSM7";
}

/** The size of one character in its encoding's units. */
const unitsOf = (ch: string, encoding: SmsEncoding) => (encoding === "GSM7" ? (EXTENSION.has(ch) ? 2 : 1) : ch.length);

/** Encoding, size and number of parts of a text. */
export function smsInfo(text: string): SmsInfo {
  const encoding = encodingOf(text);
  let units = 0;
  for (const ch of text) units += unitsOf(ch, encoding);
  return { encoding, units, parts: splitSms(text, encoding).length };
}

/** The parts a carrier sends: one when the text fits a single message, else greedy parts that never split a character. */
export function splitSms(text: string, encoding: SmsEncoding = encodingOf(text)): string[] {
  const limit = LIMITS[encoding];
  let total = 0;
  for (const ch of text) total += unitsOf(ch, encoding);
  if (total <= limit.single) return [text];
  const parts: string[] = [];
  let current = "";
  let used = 0;
  for (const ch of text) {
    const u = unitsOf(ch, encoding);
    if (used + u > limit.part) {
      parts.push(current);
      current = "";
      used = 0;
    }
    current += ch;
    used += u;
  }
  if (current) parts.push(current);
  return parts;
}
