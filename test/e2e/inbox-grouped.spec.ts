/**
 * Inbound messages in grouped transactions (inbox.ingest.ts over lib/db/group-commit.ts; the ingress's
 * messages come through tracking's inbound feed, inbox.inbound.ts, a batch a transaction): concurrent
 * calls share a transaction and keep every guarantee of a call of their own: each answered once its
 * messages are committed, each call all or nothing (a call the database refuses fails alone, the
 * others of its group commit), a messageId stored once however many calls of one group carry it,
 * one conversation per number whichever calls (or nodes) bring its first messages, the INBOUND
 * outbox rows and live-view events in the same transaction, and the announcement after the commit.
 */
import type { Service, ServiceSchema } from "moleculer";
import { QueryTypes } from "sequelize";
import type { GroupCommitter } from "../../lib/db/group-commit";
import { listening, startTestApp, uid, type TestApp } from "../helpers/app";
import { inboundIn, phone } from "../helpers/builders";
import { eventually } from "../helpers/eventually";
import { WEBHOOK_EVENTS } from "../helpers/db";

let t: TestApp;
/** What each `inbox.eventsWritten` broadcast found committed when it arrived: message.created rows of its accounts. */
const announced: Array<{ companyIds: string[]; rows: number }> = [];

const listener: ServiceSchema = {
  name: "announcements",
  events: {
    async "inbox.eventsWritten"(this: Service, ctx: { params: { companyIds: string[] } }) {
      const [row] = await t.db.sequelize.query<{ n: string }>(
        `SELECT count(*) AS n FROM inbox_events WHERE company_id = ANY($1::text[]) AND type = 'message.created'`,
        { bind: [ctx.params.companyIds], type: QueryTypes.SELECT },
      );
      announced.push({ companyIds: ctx.params.companyIds, rows: Number(row!.n) });
    },
  },
};

beforeAll(async () => {
  t = await startTestApp({ services: ["tracking", "inbox"], extraServices: [listener] });
}, 60_000);
afterAll(async () => {
  await t?.stop();
});

const rows = <T extends object>(sql: string, bind: unknown[]) => t.db.sequelize.query<T>(sql, { bind, type: QueryTypes.SELECT });
const count = async (sql: string, bind: unknown[]) => Number((await rows<{ n: string }>(sql, bind))[0]!.n);
const committerOf = (app: TestApp) =>
  (app.app.broker.getLocalService("inbox") as unknown as { ingestCommitter: GroupCommitter<unknown, { created: number }> }).ingestCommitter;
const ingest = (app: TestApp, channel: "RCS" | "WHATSAPP", items: unknown[]) =>
  app.app.broker.call("inbox.ingest", { channel, items }) as Promise<{ created: number }>;

/**
 * A refusal the validation cannot foresee (as a constraint or a bad value would be): a trigger of
 * this test's database refuses messages whose id starts with `prefix`. Answers the undo.
 */
async function refuseMessages(prefix: string): Promise<() => Promise<unknown>> {
  await t.db.sequelize.query(`
    CREATE FUNCTION test_refuse_${prefix}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.message_id LIKE '${prefix}%' THEN RAISE EXCEPTION 'refused %', NEW.message_id; END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER test_refuse_${prefix} BEFORE INSERT ON conversation_messages FOR EACH ROW EXECUTE FUNCTION test_refuse_${prefix}();`);
  return () => t.db.sequelize.query(`DROP TRIGGER test_refuse_${prefix} ON conversation_messages; DROP FUNCTION test_refuse_${prefix}();`);
}

/** What one account holds: conversations, messages, INBOUND outbox rows and message.created events. */
async function holdings(companyId: string) {
  return {
    conversations: await rows<{ channel: string; contact_number: string; unread_count: number }>(
      `SELECT channel, contact_number, unread_count FROM conversations WHERE company_id = $1 ORDER BY channel, contact_number`,
      [companyId],
    ),
    messages: (await rows<{ message_id: string }>(`SELECT message_id FROM conversation_messages WHERE company_id = $1 ORDER BY message_id`, [companyId])).map(
      (r) => r.message_id,
    ),
    outbox: (
      await rows<{ message_id: string }>(`SELECT message_id FROM ${WEBHOOK_EVENTS} WHERE company_id = $1 AND event_type = 'INBOUND' ORDER BY message_id`, [
        companyId,
      ])
    ).map((r) => r.message_id),
    created: await count(`SELECT count(*) AS n FROM inbox_events WHERE company_id = $1 AND type = 'message.created'`, [companyId]),
  };
}

it("keeps one conversation with every message when concurrent ingress requests bring a new number's first messages", async () => {
  const companyId = await listening(t.db);
  const source = phone();
  // 40 requests at once through the ingress: single objects and arrays of 3, all for one new number.
  const bodies = Array.from({ length: 40 }, (_, i) =>
    i % 4 === 0 ? [1, 2, 3].map((k) => inboundIn(companyId, { source, messageId: `m-${i}-${k}` })) : inboundIn(companyId, { source, messageId: `m-${i}` }),
  );
  const answers = await Promise.all(bodies.map((b) => t.ingress.post("/inbound/whatsapp", b)));
  expect(answers.map((r) => r.status)).toEqual(bodies.map(() => 202));
  const total = bodies.reduce((n, b) => n + (Array.isArray(b) ? b.length : 1), 0);
  const held = await holdings(companyId);
  expect(held.conversations).toEqual([{ channel: "WHATSAPP", contact_number: source, unread_count: total }]);
  expect(held.messages).toHaveLength(total);
  expect(held.outbox).toEqual(held.messages);
  expect(held.created).toBe(total);
});

it("skips only the message of tracking's inbound feed the database refuses: the rest of its batch is stored, the feed goes on", async () => {
  const companyId = await listening(t.db);
  const undo = await refuseMessages("venom");
  try {
    // One request (one feed transaction): the inbox reads them as one batch, which the database refuses.
    const body = ["ok-1", "ok-2", "venom-3", "ok-4", "ok-5"].map((messageId) => inboundIn(companyId, { messageId }));
    expect((await t.ingress.post("/inbound/whatsapp", body)).status).toBe(202);
    await eventually(async () => expect((await holdings(companyId)).messages).toEqual(["ok-1", "ok-2", "ok-4", "ok-5"]));
    // And the feed goes on.
    expect((await t.ingress.post("/inbound/whatsapp", inboundIn(companyId, { messageId: "ok-6" }))).status).toBe(202);
    await eventually(async () => expect((await holdings(companyId)).messages).toContain("ok-6"));
  } finally {
    await undo();
  }
});

it("keeps one conversation when two inbox nodes (committers of their own) store a new number's first messages at the same moment", async () => {
  const other = await startTestApp({ services: ["inbox"], db: t.db });
  try {
    const companyId = await listening(t.db);
    const source = phone();
    const calls = Array.from({ length: 20 }, (_, i) => ingest(i % 2 ? other : t, "RCS", [inboundIn(companyId, { source, destination: "agent-x" })]));
    expect((await Promise.all(calls)).map((a) => a.created)).toEqual(calls.map(() => 1));
    const held = await holdings(companyId);
    expect(held.conversations).toEqual([{ channel: "RCS", contact_number: source, unread_count: 20 }]);
    expect(held.outbox).toHaveLength(20);
  } finally {
    await other.stop();
  }
});

describe("a group with a call the database refuses", () => {
  let undo: () => Promise<unknown>;
  beforeAll(async () => {
    undo = await refuseMessages("poison");
  });
  afterAll(async () => {
    await undo();
  });

  it("commits the others of the group and fails only that call, nothing of it stored", async () => {
    const companyId = await listening(t.db);
    const shared = phone();
    const before = { ...committerOf(t).stats };
    // Twelve calls at once: the first two take the committer's two slots, the other ten queue and go
    // as one group, RCS and WhatsApp calls together (every third call is RCS).
    const channelOf = (i: number) => (i % 3 === 0 ? "RCS" : "WHATSAPP");
    const destination = (i: number) => (channelOf(i) === "RCS" ? "agent-g" : "+351210000000");
    const calls = Array.from({ length: 12 }, (_, i) =>
      i === 7
        ? [
            inboundIn(companyId, { source: shared, messageId: `bad-${i}-a` }),
            inboundIn(companyId, { messageId: `poison-${i}` }),
            inboundIn(companyId, { messageId: `bad-${i}-c` }),
          ]
        : [inboundIn(companyId, { source: shared, destination: destination(i), messageId: `good-${String(i).padStart(2, "0")}` })],
    );
    const settled = await Promise.allSettled(calls.map((items, i) => ingest(t, channelOf(i), items)));
    expect(settled.map((s) => s.status)).toEqual(calls.map((_, i) => (i === 7 ? "rejected" : "fulfilled")));
    expect(String((settled[7] as PromiseRejectedResult).reason)).toMatch(/refused poison-7/);
    const after = committerOf(t).stats;
    expect(after.splits - before.splits).toBeGreaterThan(0); // the bad call was in a group with others
    expect(after.committed - before.committed).toBe(11);
    expect(after.failed - before.failed).toBe(1);

    const held = await holdings(companyId);
    const good = calls.flatMap((c, i) => (i === 7 ? [] : c.map((m) => m.messageId))).sort();
    expect(held.messages).toEqual(good); // nothing of the refused call, not even its good items
    expect(held.outbox).toEqual(good);
    expect(held.created).toBe(11);
    expect(held.conversations).toEqual([
      { channel: "RCS", contact_number: shared, unread_count: 4 },
      { channel: "WHATSAPP", contact_number: shared, unread_count: 7 },
    ]);
  });
});

it("stores a messageId once when several calls of one group carry it, answering each call what was new in it", async () => {
  const companyId = await listening(t.db);
  const source = phone();
  const m = (id: string) => inboundIn(companyId, { source, messageId: id, receivedDate: "2026-11-20T10:00:00.000Z" });
  const before = { ...committerOf(t).stats };
  const announcedBefore = announced.length;
  // Two fillers take the slots; the next four queue together: a repeated id within a call, across calls, and a whole repeated call.
  const fillers = [ingest(t, "WHATSAPP", [inboundIn(uid())]), ingest(t, "WHATSAPP", [inboundIn(uid())])];
  const answers = await Promise.all([
    ingest(t, "WHATSAPP", [m("d-1"), m("d-2"), m("d-1")]),
    ingest(t, "WHATSAPP", [m("d-2"), m("d-3")]),
    ingest(t, "WHATSAPP", [m("d-1")]),
    ingest(t, "WHATSAPP", [m("d-1"), m("d-2"), m("d-1")]),
    ...fillers,
  ]);
  expect(answers.slice(0, 4).map((a) => a.created)).toEqual([2, 1, 0, 0]);
  const after = committerOf(t).stats;
  expect(after.groups - before.groups).toBe(3); // the two fillers, then the four together
  expect(after.largest).toBeGreaterThanOrEqual(4);

  const held = await holdings(companyId);
  expect(held.messages).toEqual(["d-1", "d-2", "d-3"]);
  expect(held.outbox).toEqual(["d-1", "d-2", "d-3"]);
  expect(held.created).toBe(3);
  expect(held.conversations).toEqual([{ channel: "WHATSAPP", contact_number: source, unread_count: 3 }]);
  // Announced after the commit: when the broadcast of this account arrived, its three events were readable.
  await eventually(() => {
    const mine = announced.slice(announcedBefore).filter((a) => a.companyIds.includes(companyId));
    expect(mine).toEqual([{ companyIds: [companyId], rows: 3 }]);
  });

  // A later call repeating them all changes nothing.
  expect((await ingest(t, "WHATSAPP", [m("d-3"), m("d-2"), m("d-1")])).created).toBe(0);
  expect(await holdings(companyId)).toEqual(held);
});

it("answers a lone call after one transaction of its own, at once", async () => {
  const before = { ...committerOf(t).stats };
  const t0 = performance.now();
  expect((await ingest(t, "RCS", [inboundIn(uid(), { destination: "agent-1" })])).created).toBe(1);
  expect(performance.now() - t0).toBeLessThan(1000);
  expect(committerOf(t).stats.groups - before.groups).toBe(1);
});
