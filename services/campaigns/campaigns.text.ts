/**
 * Campaign message text: placeholders `{{firstName}}`, `{{lastName}}`, `{{customFields.<key>}}`,
 * each with an optional fallback (`{{firstName|there}}`), and the per-channel maximum (contract
 * section 4). One linear scan, no regular expression over the text, every piece bounded: a hostile
 * text costs its length and no more.
 */
import type { Channel } from "../../lib/messaging/channels";
import type { FieldError } from "../../lib/errors";
import { codePointLength } from "../../lib/http/text";

/** The per-channel maximum, in characters: Unicode code points (an emoji is one), everywhere (checks, render, preview, sender). */
export const MAX_TEXT: Record<Channel, number> = { SMS: 1600, RCS: 3072, WHATSAPP: 4096 };

/** The length of a text in characters (code points), the unit of MAX_TEXT (lib/http/text.ts's, as file names count). */
export const characters = codePointLength;
/** The longest placeholder, braces included, and the longest fallback. */
export const MAX_PLACEHOLDER = 200;
export const MAX_FALLBACK = 100;
/** At most this many placeholders in one text. */
export const MAX_PLACEHOLDERS = 50;

const KEY = /^[A-Za-z][A-Za-z0-9_]{0,63}$/;

export type Piece = string | { name: "firstName" | "lastName"; fallback: string } | { name: "customField"; key: string; fallback: string };

export interface Parsed {
  pieces: Piece[];
  /** The custom field keys the text names. */
  customKeys: string[];
}

export class TextError extends Error {
  constructor(readonly errors: FieldError[]) {
    super(errors.map((e) => e.message).join("; "));
  }
}

const fail = (message: string): never => {
  throw new TextError([{ path: "message.text", message }]);
};

/** Parses a template; throws TextError naming the first thing wrong (unterminated, nested, unknown or malformed placeholder). */
export function parseText(text: string): Parsed {
  const pieces: Piece[] = [];
  const keys = new Set<string>();
  let literal = "";
  let i = 0;
  let count = 0;
  while (i < text.length) {
    const open = text.indexOf("{{", i);
    if (open < 0) {
      literal += text.slice(i);
      break;
    }
    literal += text.slice(i, open);
    // The placeholder ends at the first "}}" within MAX_PLACEHOLDER characters; a "{{" before it is nesting.
    const window = text.slice(open + 2, open + MAX_PLACEHOLDER);
    const close = window.indexOf("}}");
    if (close < 0) fail(`has an unterminated placeholder at character ${open + 1} (no "}}" within ${MAX_PLACEHOLDER} characters)`);
    const inner = window.slice(0, close);
    if (inner.includes("{") || inner.includes("}")) fail(`has a nested or malformed placeholder at character ${open + 1}`);
    if (++count > MAX_PLACEHOLDERS) fail(`has more than ${MAX_PLACEHOLDERS} placeholders`);
    const bar = inner.indexOf("|");
    const name = (bar < 0 ? inner : inner.slice(0, bar)).trim();
    const fallback = bar < 0 ? "" : inner.slice(bar + 1).trim();
    if (fallback.length > MAX_FALLBACK) fail(`has a fallback longer than ${MAX_FALLBACK} characters at character ${open + 1}`);
    if (literal) pieces.push(literal);
    literal = "";
    if (name === "firstName" || name === "lastName") pieces.push({ name, fallback });
    else if (name.startsWith("customFields.") && KEY.test(name.slice("customFields.".length))) {
      const key = name.slice("customFields.".length);
      keys.add(key);
      pieces.push({ name: "customField", key, fallback });
    } else fail(`has an unknown placeholder {{${name.slice(0, 80)}}}; use {{firstName}}, {{lastName}} or {{customFields.<key>}}`);
    i = open + 2 + close + 2;
  }
  if (literal) pieces.push(literal);
  return { pieces, customKeys: [...keys] };
}

/** What a recipient's text is made of: the snapshot's values (`vars`). */
export interface Vars {
  firstName?: string | null;
  lastName?: string | null;
  customFields?: Record<string, unknown>;
}

/**
 * The text for one recipient. Never cut to fit: when placeholder values push it past `max`
 * characters it comes back longer than `max` (bounded: at most `max + 1` characters, so a hostile
 * value costs no more), and the caller refuses it (the sender records the recipient FAILED; the
 * preview counts it in `tooLong`).
 */
export function render(parsed: Parsed, vars: Vars, max: number): string {
  let out = "";
  for (const p of parsed.pieces) {
    if (typeof p === "string") out += p;
    else {
      // A key is the partner's word, and may be a name every plain object answers (`constructor`,
      // `toString`): only the contact's own value counts, never what the prototype holds.
      const raw = p.name === "customField" ? ownValue(vars.customFields, p.key) : vars[p.name];
      const value = raw === null || raw === undefined || raw === "" ? p.fallback : String(raw);
      out += value;
    }
    if (out.length > 2 * (max + 1)) break;
  }
  return bound(out, max + 1);
}

/** `obj[key]` when `obj` itself holds `key`; undefined for a key only its prototype answers. */
const ownValue = (obj: Record<string, unknown> | undefined, key: string): unknown => (obj && Object.hasOwn(obj, key) ? obj[key] : undefined);

/** Whether a rendered text fits `max` characters. */
export const fits = (text: string, max: number) => text.length <= max || characters(text) <= max;

/** At most `max` characters (code points), never half a surrogate pair. */
function bound(s: string, max: number): string {
  if (s.length <= max) return s;
  let i = 0;
  for (let n = 0; n < max && i < s.length; n++) {
    const code = s.charCodeAt(i);
    i += code >= 0xd800 && code <= 0xdbff && i + 1 < s.length ? 2 : 1;
  }
  return s.slice(0, i);
}
