/** A timestamp as the API writes it (pg gives Dates; JSON gives strings); null stays null. */
export const iso = (d: Date | string | null) => (d === null ? null : d instanceof Date ? d.toISOString() : new Date(d).toISOString());

/**
 * What a date-time of the API may be, beyond `format: date-time`: written in a year from 1970 to
 * 9999 (as written, whatever its offset), and no leap second (`:60`, which JavaScript cannot read).
 * A `pattern` beside the format, so the document says it.
 */
export const YEAR_PATTERN = "^(19[7-9][0-9]|[2-9][0-9]{3})-(?![0-9-]*T[0-9]{2}:[0-9]{2}:60)";
const YEAR_RE = new RegExp(YEAR_PATTERN);

/** The instant of an RFC 3339 date-time (ms since the epoch), NaN when it is none or YEAR_PATTERN refuses it. */
export function instantOf(value: string): number {
  return YEAR_RE.test(value) ? Date.parse(value) : NaN;
}
