/**
 * The live state an operator asks the REPL for (lib/repl/repl-commands.ts): each service answers its own
 * part as a small table through an internal action (`visibility: "public"`: callable by any node,
 * never a partner route), so the REPL needs no service's internals, only this shape.
 */
export type OpsCell = string | number | null;

/** Rows a listing answers at most (the rest is counted in its note). */
export const OPS_ROWS = 50;

export interface OpsTable {
  columns: string[];
  rows: OpsCell[][];
  /** A line under the table ("and 12 more", say). */
  note?: string;
}

/** Seconds as the tables show them (one decimal), or "-" when there is nothing. */
export const seconds = (s: number | null | undefined): string => (s === null || s === undefined || Number.isNaN(s) ? "-" : `${Math.max(0, s).toFixed(1)} s`);

/** The table as aligned text, one line per row, a header first; "(none)" when it has no rows. */
export function formatTable(t: OpsTable): string {
  if (t.rows.length === 0) return `(none)${t.note ? `\n${t.note}` : ""}`;
  const cells = [t.columns, ...t.rows.map((r) => r.map((c) => (c === null ? "-" : String(c))))];
  const widths = t.columns.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? "").length)));
  const lines = cells.map((r) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd(),
  );
  return [...lines, ...(t.note ? [t.note] : [])].join("\n");
}
