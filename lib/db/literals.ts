/**
 * SQL text for values that cannot travel as bind parameters: a COPY takes none (exports run their
 * statement inside one), and a LIKE pattern takes its own escapes.
 */
import pg from "pg";

/** A value as an SQL literal of the given type (strings escaped by pg's own escapeLiteral). */
export function sqlLiteral(value: unknown, cast: string): string {
  if (Array.isArray(value)) return `ARRAY[${value.map((v) => pg.escapeLiteral(String(v))).join(", ")}]::${cast}`;
  if (typeof value === "number" && Number.isFinite(value)) return `${value}::${cast}`;
  return `${pg.escapeLiteral(String(value))}::${cast}`;
}

/** `%text%` for ILIKE, with LIKE's own characters (% _ \\) taken literally. */
export const likeEscape = (s: string) => `%${s.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
