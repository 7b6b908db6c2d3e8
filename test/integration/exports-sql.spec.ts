/**
 * The exports' statements (tracking's and contacts', tracking.export.ts and contacts.export.ts) inline the filters' values (COPY takes no parameters): run against a database
 * with hostile values, the matching row comes back, nothing else, and the tables are still there.
 * (The literals' text is checked in test/unit/exports-sql.spec.ts.)
 */
import { randomUUID } from "node:crypto";
import { QueryTypes, type Sequelize } from "sequelize";
import { contactExportSelect } from "../../services/contacts/contacts.export";
import { messageExportSelect } from "../../services/tracking/tracking.export";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { NASTY } from "../helpers/nasty";

describe("the export SQL against a database", () => {
  let t: TestDatabase;
  let sequelize: Sequelize;
  const company = `acme-${randomUUID()}`;
  const other = `other-${randomUUID()}`;

  const rows = <T extends object>(sql: string) => sequelize.query<T>(sql, { type: QueryTypes.SELECT });
  const tablesLeft = async () =>
    (await rows<{ n: string }>("SELECT count(*) AS n FROM pg_tables WHERE tablename IN ('messages', 'contacts', 'contact_custom_fields')"))[0]!.n;

  beforeAll(async () => {
    t = await createTestDatabase();
    sequelize = t.db.sequelize;
    // One message per hostile value (as destination and campaign), in this account and another one.
    const messages = [company, other].flatMap((c) =>
      NASTY.map((v, i) => ({ c, id: `m-${i}`, d: v, cp: v, s: new Date(Date.UTC(2026, 0, 1, 0, i)).toISOString() })),
    );
    await sequelize.query(
      `INSERT INTO messages (company_id, channel, customer_message_id, destination, campaign_id, sent_at, delivery_date, status_code)
       SELECT x.c, 'SMS', x.id, x.d, x.cp, x.s, x.s, 3 FROM jsonb_to_recordset($1::jsonb) AS x(c text, id text, d text, cp text, s timestamptz)`,
      { bind: [JSON.stringify(messages)] },
    );
    // One contact per hostile value (as last name, email and a TEXT custom field).
    const contacts = [company, other].flatMap((c) =>
      NASTY.map((v, i) => ({ id: randomUUID(), c, ln: v, e: `user${i}.${v.length}@example.com`, cf: { note: v } })),
    );
    await sequelize.query(
      `INSERT INTO contacts (id, company_id, last_name, email, custom_fields)
       SELECT x.id, x.c, x.ln, x.e, x.cf FROM jsonb_to_recordset($1::jsonb) AS x(id uuid, c text, ln text, e text, cf jsonb)`,
      { bind: [JSON.stringify(contacts)] },
    );
    await sequelize.query(`INSERT INTO contact_custom_fields (company_id, key, type) VALUES ($1, 'note', 'TEXT'), ($2, 'note', 'TEXT')`, {
      bind: [company, other],
    });
  });
  afterAll(() => t?.drop());

  it.each(NASTY.map((v, i) => [v, i]))("returns only the message whose destination and campaign are %j", async (value, i) => {
    for (const type of ["MESSAGE_HISTORY", "DELIVERY_REPORTS"] as const) {
      const found = await rows<{ customerMessageId: string; destination: string; campaignId: string }>(
        messageExportSelect(type, company, { destination: value, campaignId: value }),
      );
      expect(found.map((r) => r.customerMessageId)).toEqual([`m-${i}`]);
    }
    expect(await tablesLeft()).toBe("3");
  });

  it("keeps the account an inlined literal too", async () => {
    const found = await rows(messageExportSelect("MESSAGE_HISTORY", `${company}' OR '1'='1`, {}));
    expect(found).toEqual([]);
    expect(await rows(messageExportSelect("MESSAGE_HISTORY", company, {}))).toHaveLength(NASTY.length);
  });

  it.each(NASTY.map((v, i) => [v, i]))("returns only the contact whose custom field is %j", async (value, i) => {
    const found = await rows<{ lastName: string; email: string; "customFields.note": string }>(
      await contactExportSelect(sequelize, company, { "customFields.note": value }),
    );
    expect(found).toHaveLength(1);
    expect(found[0]!.email).toBe(`user${i}.${value.length}@example.com`);
    expect(await tablesLeft()).toBe("3");
  });

  it.each(NASTY.map((v, i) => [v, i]))("finds the contact named %j by fullName and search, the LIKE characters taken literally", async (value, i) => {
    for (const filters of [{ fullName: value }, { search: value }]) {
      const found = await rows<{ email: string; lastName: string }>(await contactExportSelect(sequelize, company, filters));
      // A value may be part of another's name ("it''s" holds "it'"): the one asked for is there, and every match holds the value.
      expect(found.map((r) => r.email)).toContain(`user${i}.${value.length}@example.com`);
      for (const r of found) expect(r.lastName.toLowerCase()).toContain(value.toLowerCase());
    }
    expect(await tablesLeft()).toBe("3");
  });

  it("matches % and _ only literally", async () => {
    expect(await rows(await contactExportSelect(sequelize, company, { fullName: "%" }))).toEqual([]);
    expect(await rows(await contactExportSelect(sequelize, company, { search: "_" }))).toEqual([]);
  });

  it("keeps a NUL, a backslash and a quote of a filter inside its literal (the statement runs, finds nothing, drops nothing)", async () => {
    for (const value of ["a\u0000'; DROP TABLE contacts; --", "\\'; DROP TABLE contacts; --", "x\u0000\\\u0000'"]) {
      for (const filters of [{ fullName: value }, { search: value }, { email: value }]) {
        expect(await rows(await contactExportSelect(sequelize, company, filters))).toEqual([]);
      }
    }
    expect(await tablesLeft()).toBe("3");
  });
});
