/**
 * Pieces of the statements that export CSV files (exports' COPY; the statements are the owners':
 * `tracking.exportStatement`, `contacts.exportStatement`). Every cell is text made by the query:
 * timestamps in ISO 8601 UTC as the API writes them, booleans `true`/`false`, statuses by name; a
 * cell a partner's data can start goes through `csv_cell` (the contract's formula-injection rule, a
 * function of the database created by migration 0008 for every export statement).
 */

/** Columns of a CSV file: header name -> SQL expression, in the file's column order. */
export type CsvColumns = Array<[string, string]>;

/** A timestamptz column as ISO 8601 UTC with milliseconds (as the API writes dates). */
export const isoCell = (col: string) => `to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** The SELECT list of `columns`, each named by its header. */
export const csvSelect = (columns: CsvColumns) => columns.map(([name, expr]) => `${expr} AS "${name}"`).join(", ");
