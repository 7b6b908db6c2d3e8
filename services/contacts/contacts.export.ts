/**
 * The statement of the contacts export, which contacts writes over its own `contacts` and hands to
 * the exports service (`contacts.exportStatement`): exports runs it inside a COPY in its worker pool
 * and never names contacts' tables or columns itself (issue 33 item 1). Every contact field, then one
 * `customFields.<key>` column per custom field the account declares (as declared now), filtered
 * and sorted as GET /contacts. COPY takes no parameters, so the filters' values are inlined as
 * escaped literals.
 */
import pg from "pg";
import { QueryTypes, type Sequelize } from "sequelize";
import { csvSelect, isoCell, type CsvColumns } from "../../lib/db/csv";
import type { ContactExportFilters, CustomFieldType } from "./contacts.contract";
import { contactOrder, contactWhere } from "./contacts.filters";

export const CONTACT_EXPORT_COLUMNS: CsvColumns = [
  ["id", "c.id"],
  ["firstName", "csv_cell(c.first_name)"],
  ["lastName", "csv_cell(c.last_name)"],
  ["gender", "c.gender"],
  ["phoneNumber", "csv_cell(c.phone_number)"],
  ["email", "csv_cell(c.email)"],
  ["isTest", "c.is_test::text"],
  ["isValid", "c.is_valid::text"],
  ["communicationSupported", "array_to_string(c.communication_supported, ',')"],
  ["lastContactType", "c.last_contact_type"],
  ["lastCampaignType", "c.last_campaign_type"],
  ["createdAt", isoCell("c.created_at")],
  ["updatedAt", isoCell("c.updated_at")],
];

/** The export's SELECT. A filter naming a custom field that no longer exists is the ApiError (400) of contactWhere. */
export async function contactExportSelect(sequelize: Sequelize, companyId: string, filters: ContactExportFilters): Promise<string> {
  const declared = await sequelize.query<{ key: string; type: CustomFieldType }>(
    "SELECT key, type FROM contact_custom_fields WHERE company_id = $1 ORDER BY key",
    {
      bind: [companyId],
      type: QueryTypes.SELECT,
    },
  );
  const { sortBy = "fullName", sortOrder = "asc", ...only } = filters;
  const where = contactWhere(companyId, only, new Map(declared.map((d) => [d.key, d.type])));
  const custom: CsvColumns = declared.map((d) => [`customFields.${d.key}`, `csv_cell(c.custom_fields ->> ${pg.escapeLiteral(d.key)})`]);
  const sql = `SELECT ${csvSelect([...CONTACT_EXPORT_COLUMNS, ...custom])} FROM contacts c WHERE ${where.sql} ${contactOrder(sortBy, sortOrder)}`;
  return inlineReplacements(sql, where.replacements, (v) => {
    if (typeof v === "string" || typeof v === "number") return sequelize.escape(v);
    if (typeof v === "boolean") return String(v);
    throw new Error(`a contact filter value of type ${typeof v} cannot be inlined`);
  });
}

/**
 * `sql` with each named replacement (`:name`, as contactWhere writes them) made a literal by
 * `escape` (Sequelize's public `sequelize.escape`: quotes doubled, NUL written `\0`); an array
 * becomes its literals separated by commas, for `IN (:name)`. Quoted literals and identifiers are
 * copied as they are, and `::` casts are not names, so only the fragment's own placeholders change.
 * A name with no value is an error, never left in the statement.
 */
export function inlineReplacements(sql: string, values: Record<string, unknown>, escape: (value: unknown) => string): string {
  return sql.replace(/'(?:[^']|'')*'|"(?:[^"]|"")*"|::|(?<![\w:]):([A-Za-z_]\w*)/g, (match, name: string | undefined) => {
    if (name === undefined) return match;
    if (!Object.hasOwn(values, name) || values[name] === undefined) throw new Error(`no value for the replacement :${name}`);
    const value = values[name];
    return Array.isArray(value) ? value.map((v) => escape(v)).join(", ") : escape(value);
  });
}
