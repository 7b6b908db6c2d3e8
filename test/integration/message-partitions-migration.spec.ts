/**
 * Migration 0023 moves `messages` into daily partitions: every row keeps its data, gets an id of its
 * creation day (its old id's low bits), lands in that day's partition, and its key in
 * `message_keys`; polling then finds it, a repeat registration stays a repeat, and the down step
 * puts the rows back into one table with the unique key. Migration 0024 gives each contact the
 * channels its number's latest final receipt refused; 0025 moves the attempts log and the live-view
 * events into daily partitions. The tests run in order, each from where the last left the schema.
 */
import { QueryTypes } from "sequelize";
import { inTransaction, migrator, type Database } from "../../lib/db/db";
import { statusesOf } from "../../services/tracking/tracking.queries";
import { writeItems } from "../../services/tracking/tracking.writes";
import { withUnmigratedDatabase } from "../helpers/db";

let db: Database;
withUnmigratedDatabase((made) => (db = made));

const q = <T extends object>(sql: string, bind: unknown[] = []) => db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT });

const COLUMNS = `company_id, channel, customer_message_id, destination, sent_at, total_parts, text, campaign_id, simulation, status_code,
                 delivery_date, read_at, price, part_codes, last_part_date, created_at, updated_at`;

it("moves every message into its creation day's partition with its key, and back down", async () => {
  await migrator(db).up({ to: "20261129-0022-webhook-accounts" });
  await db.sequelize.query(`
    INSERT INTO messages (company_id, channel, customer_message_id, destination, sent_at, total_parts, text, campaign_id, simulation,
                          status_code, delivery_date, read_at, price, part_codes, last_part_date, created_at) VALUES
      ('acme', 'SMS', 'a-1', '+351911111111', '2026-01-10T10:00:00Z', 2, 'two parts', 'camp', false, 3, '2026-01-10T10:01:00Z', NULL, 0.1, '{3,3}', '2026-01-10T10:01:00Z', '2026-01-10T10:00:01Z'),
      ('acme', 'RCS', 'a-1', '+351911111111', '2026-06-01T00:00:00Z', 1, 'same id, other channel', NULL, false, 9, NULL, '2026-06-01T00:05:00Z', NULL, NULL, NULL, '2026-06-01T00:00:00Z'),
      ('acme', 'SMS', 'a-2', '+351911111112', NULL, 1, NULL, NULL, false, 3, '2026-06-01T23:59:59Z', NULL, NULL, NULL, NULL, '2026-06-01T23:59:59.999Z'),
      ('other', 'SMS', 'a-1', '+351922222222', '2026-11-27T08:00:00Z', 1, 'theirs', NULL, true, 1, NULL, NULL, NULL, NULL, NULL, now())`);
  const before = await q<Record<string, unknown>>(`SELECT ${COLUMNS} FROM messages ORDER BY company_id, channel, customer_message_id`);

  await migrator(db).up({ to: "20261130-0023-message-partitions" });

  // The same rows, each in its creation day's partition (UTC), its key pointing at it.
  expect(await q(`SELECT ${COLUMNS} FROM messages ORDER BY company_id, channel, customer_message_id`)).toEqual(before);
  const placed = await q<{ customer_message_id: string; channel: string; part: string; day: string; keyed: boolean }>(
    `SELECT m.customer_message_id, m.channel, m.tableoid::regclass::text AS part, to_char(m.created_at AT TIME ZONE 'UTC', 'YYYYMMDD') AS day,
            EXISTS (SELECT 1 FROM message_keys k WHERE k.company_id = m.company_id AND k.channel = m.channel AND k.customer_message_id = m.customer_message_id AND k.id = m.id) AS keyed
       FROM messages m ORDER BY m.created_at`,
  );
  expect(placed).toHaveLength(4);
  for (const p of placed) {
    expect(p.part).toBe(`messages_p${p.day}`);
    expect(p.keyed).toBe(true);
  }
  expect(await q(`SELECT count(*)::int AS n FROM message_keys`)).toEqual([{ n: 4 }]);
  expect(await q(`SELECT to_regclass('messages_unpartitioned') AS t`)).toEqual([{ t: null }]);

  // Polling finds them; a repeat registration changes nothing; a new one is a new row.
  const polled = await statusesOf(db.sequelize, "acme", "SMS", ["a-1", "a-2", "nope"]);
  expect(polled.map((s) => [s.customerMessageId, s.statusCode])).toEqual([
    ["a-1", 3],
    ["a-2", 3],
    ["nope", 0],
  ]);
  await db.sequelize.query(`SELECT ensure_message_partitions((now() AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date)`);
  await inTransaction(db.sequelize, (exec) =>
    writeItems(exec, [
      { kind: "message", message: { companyId: "acme", channel: "SMS", customerMessageId: "a-1", destination: "+351900000000", text: "again" } },
      { kind: "message", message: { companyId: "acme", channel: "SMS", customerMessageId: "a-2", destination: "+351911111112", text: "late registration" } },
      { kind: "message", message: { companyId: "acme", channel: "SMS", customerMessageId: "a-3", destination: "+351911111113" } },
    ]),
  );
  const after = await q<{ customer_message_id: string; text: string | null; n: number }>(
    `SELECT customer_message_id, max(text) AS text, count(*)::int AS n FROM messages WHERE company_id = 'acme' AND channel = 'SMS' GROUP BY 1 ORDER BY 1`,
  );
  expect(after).toEqual([
    { customer_message_id: "a-1", text: "two parts", n: 1 },
    { customer_message_id: "a-2", text: "late registration", n: 1 },
    { customer_message_id: "a-3", text: null, n: 1 },
  ]);

  await migrator(db).down({ to: "20261130-0023-message-partitions" });
  expect(await q(`SELECT to_regclass('message_keys') AS t`)).toEqual([{ t: null }]);
  const down = await q<Record<string, unknown>>(
    `SELECT ${COLUMNS} FROM messages WHERE customer_message_id <> 'a-3' ORDER BY company_id, channel, customer_message_id`,
  );
  expect(down).toEqual(
    before.map((r) =>
      r.customer_message_id === "a-2" && r.channel === "SMS" ? { ...r, text: "late registration", sent_at: expect.any(Date), updated_at: expect.any(Date) } : r,
    ),
  );
  const [dup] = await q<{ ok: boolean }>(`SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE tablename = 'messages' AND indexname = 'messages_key') AS ok`);
  expect(dup!.ok).toBe(true);
});

it("fills the contacts' refused channels from the latest final receipt per number (0024), and drops them down", async () => {
  await migrator(db).up({ to: "20261130-0023-message-partitions" });
  await db.sequelize.query(`SELECT ensure_message_partitions('2026-03-01', '2026-03-01')`);
  // +...01: UNSUPPORTED on RCS, then DELIVERED later (not refused); +...02: DISABLED on WhatsApp and RCS in flight;
  // +...03: UNSUPPORTED for another account only; +...04: DELIVERED, then UNSUPPORTED later (refused).
  await db.sequelize.query(`
    INSERT INTO messages (company_id, channel, customer_message_id, destination, sent_at, status_code, created_at) VALUES
      ('acme', 'RCS', 'r-1a', '+351900000001', '2026-03-01T10:00:00Z', 11, '2026-03-01T10:00:00Z'),
      ('acme', 'RCS', 'r-1b', '+351900000001', '2026-03-01T11:00:00Z', 3, '2026-03-01T11:00:00Z'),
      ('acme', 'WHATSAPP', 'w-2', '+351900000002', '2026-03-01T10:00:00Z', 10, '2026-03-01T10:00:00Z'),
      ('acme', 'RCS', 'r-2', '+351900000002', '2026-03-01T12:00:00Z', 0, '2026-03-01T12:00:00Z'),
      ('other', 'RCS', 'r-3', '+351900000003', '2026-03-01T10:00:00Z', 11, '2026-03-01T10:00:00Z'),
      ('acme', 'RCS', 'r-4a', '+351900000004', '2026-03-01T10:00:00Z', 3, '2026-03-01T10:00:00Z'),
      ('acme', 'RCS', 'r-4b', '+351900000004', '2026-03-01T11:00:00Z', 11, '2026-03-01T11:00:00Z')`);
  await db.sequelize.query(`
    INSERT INTO contacts (id, company_id, phone_number) VALUES
      ('00000000-0000-4000-8000-000000000001', 'acme', '+351900000001'),
      ('00000000-0000-4000-8000-000000000002', 'acme', '+351900000002'),
      ('00000000-0000-4000-8000-000000000003', 'acme', '+351900000003'),
      ('00000000-0000-4000-8000-000000000004', 'acme', '+351900000004')`);
  await migrator(db).up({ to: "20261130-0024-contact-channel-refusals" });
  expect(await q(`SELECT phone_number, communication_refused FROM contacts ORDER BY phone_number`)).toEqual([
    { phone_number: "+351900000001", communication_refused: [] },
    { phone_number: "+351900000002", communication_refused: ["WHATSAPP"] },
    { phone_number: "+351900000003", communication_refused: [] },
    { phone_number: "+351900000004", communication_refused: ["RCS"] },
  ]);
  await migrator(db).down({ to: "20261130-0024-contact-channel-refusals" });
  expect(await q(`SELECT count(*)::int AS n FROM information_schema.columns WHERE table_name = 'contacts' AND column_name = 'communication_refused'`)).toEqual([
    { n: 0 },
  ]);
});

it("moves the attempts log (its last 8 days) and every live-view event into daily partitions (0025), and back down", async () => {
  await migrator(db).up({ to: "20261130-0024-contact-channel-refusals" });
  await db.sequelize.query(`
    INSERT INTO webhook_attempts (company_id, channel, event_type, message_id, num_part, attempt, attempted_at, http_status, duration_ms, error, next_attempt_at, outcome) VALUES
      ('acme', 'SMS', 'DELIVERY', 'm-1', 1, 1, now() - interval '1 hour', 200, 12, NULL, NULL, 'DELIVERED'),
      ('acme', 'SMS', 'DELIVERY', 'm-2', 1, 2, now() - interval '3 days', 500, 40, 'HTTP 500', now() - interval '3 days' + interval '1 minute', 'RETRYING'),
      ('acme', 'SMS', 'DELIVERY', 'm-3', 1, 1, now() - interval '20 days', 200, 9, NULL, NULL, 'DELIVERED')`);
  await db.sequelize.query(`
    INSERT INTO inbox_event_counters (company_id, last_id) VALUES ('acme', 3);
    INSERT INTO inbox_events (company_id, id, conversation_id, type, data, created_at) VALUES
      ('acme', 1, '00000000-0000-4000-8000-0000000000c1', 'message.created', '{"n": 1}', now() - interval '40 days'),
      ('acme', 2, '00000000-0000-4000-8000-0000000000c1', 'conversation.read', '{"n": 2}', now() - interval '2 days'),
      ('acme', 3, '00000000-0000-4000-8000-0000000000c1', 'conversation.archived', '{"n": 3}', now())`);
  await migrator(db).up({ to: "20261130-0025-day-partitions" });

  const attempts = await q<{ message_id: string; outcome: string; part: string; day: string }>(
    `SELECT message_id, outcome, tableoid::regclass::text AS part, to_char(attempted_at AT TIME ZONE 'UTC', 'YYYYMMDD') AS day FROM webhook_attempts ORDER BY id`,
  );
  expect(attempts.map((a) => [a.message_id, a.outcome])).toEqual([
    ["m-1", "DELIVERED"],
    ["m-2", "RETRYING"],
  ]);
  for (const a of attempts) expect(a.part).toBe(`webhook_attempts_p${a.day}`);
  const events = await q<{ id: string; type: string; part: string; day: string }>(
    `SELECT id, type, tableoid::regclass::text AS part, to_char(created_at AT TIME ZONE 'UTC', 'YYYYMMDD') AS day FROM inbox_events ORDER BY id`,
  );
  // Every event moves (their retention is a setting; readers and the retention loop apply it).
  expect(events.map((e) => [Number(e.id), e.type])).toEqual([
    [1, "message.created"],
    [2, "conversation.read"],
    [3, "conversation.archived"],
  ]);
  for (const e of events) expect(e.part).toBe(`inbox_events_p${e.day}`);
  // A new attempt takes the next id of the old sequence.
  const [next] = await q<{ id: string }>(
    `INSERT INTO webhook_attempts (company_id, channel, event_type, message_id, attempt, attempted_at, outcome) VALUES ('acme', 'SMS', 'DELIVERY', 'm-4', 1, now(), 'DELIVERED') RETURNING id`,
  );
  expect(Number(next!.id)).toBe(4);

  await migrator(db).down({ to: "20261130-0025-day-partitions" });
  expect(await q(`SELECT count(*)::int AS n FROM pg_inherits WHERE inhparent IN ('webhook_attempts'::regclass, 'inbox_events'::regclass)`)).toEqual([{ n: 0 }]);
  expect((await q<{ message_id: string }>(`SELECT message_id FROM webhook_attempts ORDER BY id`)).map((r) => r.message_id)).toEqual(["m-1", "m-2", "m-4"]);
  expect((await q<{ id: string }>(`SELECT id FROM inbox_events ORDER BY id`)).map((r) => Number(r.id))).toEqual([1, 2, 3]);
  const [again] = await q<{ id: string }>(
    `INSERT INTO webhook_attempts (company_id, channel, event_type, message_id, attempt, attempted_at, outcome) VALUES ('acme', 'SMS', 'DELIVERY', 'm-5', 1, now(), 'DELIVERED') RETURNING id`,
  );
  expect(Number(again!.id)).toBe(5);
});
