/**
 * Opt-outs said by end users and reported by upstreams (contract section 7): STOP/START keywords in
 * inbound RCS and WhatsApp messages (the message still stored, still an INBOUND event), upstream
 * reports on POST /internal/v1/opt-outs (arrays, ordered by `at`, repeats harmless, 400 when
 * malformed), inbox replies to an opted-out number refused with 409 recipient-opted-out (nothing
 * sent), and a 503 to retry while no contacts node can record them.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { inboundIn, phone } from "../helpers/builders";
import { expectProblem } from "../helpers/expect";
import { WEBHOOK_EVENTS } from "../helpers/db";

let t: TestApp;
let server: Server;
/** Paths the upstream double was asked to send to. */
const sent: string[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    sent.push(req.url ?? "");
    req.resume().on("end", () => res.writeHead(202).end());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "tracking", "inbox"],
    listening: true,
    config: {
      upstreamMode: "http",
      upstreamSmsUrl: `${base}/sms`,
      upstreamRcsUrl: `${base}/rcs`,
      upstreamWhatsappUrl: `${base}/whatsapp`,
      rateLimitRps: 10000,
    },
  });
}, 60_000);
afterAll(async () => {
  await t?.stop();
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
});

const account = () => t.newAccount(["CONTACTS", "INBOX", "RCS", "WHATSAPP"]);
const inbound = async (channel: "rcs" | "whatsapp", body: unknown) => expect((await t.ingress.post(`/inbound/${channel}`, body)).status).toBe(202);
const optOuts = async (a: Account, n: string) =>
  ((await a.api.get(`/contacts/opt-outs?phoneNumber=${encodeURIComponent(n)}`)).body.data as Array<{ channel: string; source: string }>).map(
    (o) => `${o.channel} ${o.source}`,
  );
const chatOf = async (a: Account, n: string, channel: string) => {
  const res = await a.api.get(`/inbox/conversations?status=ALL&channel=${channel}&search=${encodeURIComponent(n)}`);
  return res.body.data[0] as { chatId: string; lastMessagePreview: string };
};
const inboundEvents = (companyId: string) =>
  t.db.sequelize.query<{ message_id: string; payload: { text?: string } }>(
    `SELECT message_id, payload FROM ${WEBHOOK_EVENTS} WHERE company_id = $1 AND event_type = 'INBOUND' ORDER BY tx, id`,
    { bind: [companyId], type: QueryTypes.SELECT },
  );
const at = (offsetS: number) => new Date(Date.now() + offsetS * 1000).toISOString();

describe("keywords", () => {
  it("opts the sender out of that channel on STOP (source KEYWORD), stores the message and writes its INBOUND event", async () => {
    const a = await account();
    const n = phone();
    const stop = inboundIn(a.companyId, { source: n, text: "  Stop " });
    await inbound("whatsapp", stop);
    expect(await optOuts(a, n)).toEqual(["WHATSAPP KEYWORD"]);
    const chat = await chatOf(a, n, "WHATSAPP");
    expect(chat.lastMessagePreview).toBe("  Stop ");
    const thread = await a.api.get(`/inbox/conversations/${chat.chatId}/messages`);
    expect(thread.body.data).toEqual([expect.objectContaining({ id: stop.messageId, direction: "INBOUND", text: "  Stop " })]);
    expect(await inboundEvents(a.companyId)).toEqual([{ message_id: stop.messageId, payload: expect.objectContaining({ text: "  Stop " }) }]);

    // Every opt-out keyword, on RCS too; another account is not touched.
    const words = ["STOPALL", "stop  all", "Unsubscribe", "CANCEL", "end", "QUIT", "OptOut", "REVOKE"];
    const numbers = words.map(() => phone());
    await inbound(
      "rcs",
      words.map((text, i) => inboundIn(a.companyId, { source: numbers[i], destination: "agent", text })),
    );
    for (const m of numbers) expect(await optOuts(a, m)).toEqual(["RCS KEYWORD"]);
    const b = await account();
    expect((await b.api.get("/contacts/opt-outs")).body.total).toBe(0);
  });

  it("takes a STOP dated at the edges the ingress accepts (a year from 1970 to 9999 as written), with the rest of its batch", async () => {
    const a = await account();
    const [n, m] = [phone(), phone()];
    const batch = [
      inboundIn(a.companyId, { source: n, text: "STOP", receivedDate: "1970-01-01T00:30:00+01:00" }),
      inboundIn(a.companyId, { source: m, text: "stop", receivedDate: "9999-06-01T00:00:00Z" }),
      inboundIn(a.companyId, { text: "hello" }),
    ];
    await inbound("whatsapp", batch);
    expect(await optOuts(a, n)).toEqual(["WHATSAPP KEYWORD"]);
    expect(await optOuts(a, m)).toEqual(["WHATSAPP KEYWORD"]);
    expect((await inboundEvents(a.companyId)).map((e) => e.message_id).sort()).toEqual(batch.map((b) => b.messageId).sort());
  });

  it("changes nothing for a sentence that merely contains a keyword, or a message without text", async () => {
    const a = await account();
    const n = phone();
    for (const text of ["please stop", "STOP!", "stop it", "STOP STOP", "yes please", "START NOW"])
      await inbound("whatsapp", inboundIn(a.companyId, { source: n, text }));
    await inbound("whatsapp", inboundIn(a.companyId, { source: n, text: undefined, messageType: "IMAGE", mediaKey: "u/1.jpg" }));
    expect(await optOuts(a, n)).toEqual([]);
    expect((await inboundEvents(a.companyId)).length).toBe(7);
  });

  it("opts back in on START, UNSTOP or YES; a STOP delivered again after it changes nothing", async () => {
    const a = await account();
    const n = phone();
    const stop = inboundIn(a.companyId, { source: n, text: "STOP", receivedDate: at(-60) });
    await inbound("whatsapp", stop);
    expect(await optOuts(a, n)).toEqual(["WHATSAPP KEYWORD"]);
    await inbound("whatsapp", inboundIn(a.companyId, { source: n, text: "start", receivedDate: at(-30) }));
    expect(await optOuts(a, n)).toEqual([]);
    await inbound("whatsapp", stop);
    expect(await optOuts(a, n)).toEqual([]);
    expect((await inboundEvents(a.companyId)).length).toBe(2);
    for (const [stopText, startText] of [
      ["QUIT", "UNSTOP"],
      ["END", "Yes"],
    ]) {
      await inbound("whatsapp", inboundIn(a.companyId, { source: n, text: stopText }));
      expect(await optOuts(a, n)).toEqual(["WHATSAPP KEYWORD"]);
      await inbound("whatsapp", inboundIn(a.companyId, { source: n, text: startText }));
      expect(await optOuts(a, n)).toEqual([]);
    }
  });
});

describe("POST /internal/v1/opt-outs", () => {
  const report = (companyId: string, over: Record<string, unknown> = {}) => ({
    companyId,
    channel: "SMS",
    phoneNumber: phone(),
    action: "OPT_OUT",
    at: at(0),
    ...over,
  });

  it("stores an upstream's opt-out (202 once committed, source UPSTREAM) and its opt-in; a repeat is harmless", async () => {
    const a = await account();
    const r = report(a.companyId);
    const res = await t.ingress.post("/opt-outs", r);
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ accepted: 1 });
    expect(await optOuts(a, r.phoneNumber)).toEqual(["SMS UPSTREAM"]);
    expect((await t.ingress.post("/opt-outs", r)).status).toBe(202);
    expect(await optOuts(a, r.phoneNumber)).toEqual(["SMS UPSTREAM"]);
    expect((await t.ingress.post("/opt-outs", { ...r, action: "OPT_IN", at: at(1) })).status).toBe(202);
    expect(await optOuts(a, r.phoneNumber)).toEqual([]);
  });

  it("takes an array in one transaction, applying each number's reports in order of `at`, never a late one over a newer", async () => {
    const a = await account();
    const [n1, n2, n3] = [phone(), phone(), phone()];
    const body = [
      // n1: the opt-in came first, its report arrives last in the array.
      report(a.companyId, { phoneNumber: n1, action: "OPT_OUT", at: at(-10) }),
      report(a.companyId, { phoneNumber: n1, action: "OPT_IN", at: at(-20) }),
      // n2: out, then in: in the end not opted out.
      report(a.companyId, { phoneNumber: n2, action: "OPT_IN", at: at(-5) }),
      report(a.companyId, { phoneNumber: n2, action: "OPT_OUT", at: at(-15) }),
      report(a.companyId, { phoneNumber: n3, channel: "RCS" }),
    ];
    const res = await t.ingress.post("/opt-outs", body);
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ accepted: 5 });
    expect(await optOuts(a, n1)).toEqual(["SMS UPSTREAM"]);
    expect(await optOuts(a, n2)).toEqual([]);
    expect(await optOuts(a, n3)).toEqual(["RCS UPSTREAM"]);
    // A report older than the number's last change, in a later request, is ignored either way.
    expect((await t.ingress.post("/opt-outs", report(a.companyId, { phoneNumber: n1, action: "OPT_IN", at: at(-12) }))).status).toBe(202);
    expect(await optOuts(a, n1)).toEqual(["SMS UPSTREAM"]);
    expect((await t.ingress.post("/opt-outs", report(a.companyId, { phoneNumber: n2, action: "OPT_OUT", at: at(-8) }))).status).toBe(202);
    expect(await optOuts(a, n2)).toEqual([]);
    // A report dated in the future counts as now: the partner can still remove it.
    const later = report(a.companyId, { at: "2100-01-01T00:00:00Z" });
    expect((await t.ingress.post("/opt-outs", later)).status).toBe(202);
    expect((await a.api.delete(`/contacts/opt-outs/SMS/${encodeURIComponent(later.phoneNumber)}`)).status).toBe(204);
  });

  it("answers 400 naming each bad field, and stores nothing of a body with one bad object", async () => {
    const a = await account();
    const good = report(a.companyId);
    const cases: Array<[unknown, string]> = [
      [{ ...good, channel: "EMAIL" }, "channel"],
      [{ ...good, phoneNumber: "+351000" }, "phoneNumber"],
      [{ ...good, phoneNumber: "351912345678" }, "phoneNumber"],
      [{ ...good, action: "STOP" }, "action"],
      [{ ...good, at: "yesterday" }, "at"],
      [{ ...good, at: undefined }, "at"],
      [{ ...good, source: "API" }, "source"],
      [{ ...good, companyId: "" }, "companyId"],
    ];
    for (const [body, path] of cases) {
      const res = await t.ingress.post("/opt-outs", body);
      expectProblem(res, 400);
      expect(res.body.errors[0].path).toBe(path);
    }
    const mixed = await t.ingress.post("/opt-outs", [good, { ...good, phoneNumber: "+1" }]);
    expectProblem(mixed, 400);
    expect(mixed.body.errors).toEqual([expect.objectContaining({ path: "[1].phoneNumber" })]);
    expectProblem(await t.ingress.post("/opt-outs", []), 400);
    expectProblem(
      await t.ingress.post(
        "/opt-outs",
        Array.from({ length: 1001 }, () => good),
      ),
      400,
    );
    expect(await optOuts(a, good.phoneNumber)).toEqual([]);
    expectProblem(await t.ingress.request("GET", "/opt-outs"), 405);
  });
});

describe("inbox replies", () => {
  it("refuses a reply to a number opted out of the conversation's channel (409 recipient-opted-out, nothing sent), and sends once it opts in", async () => {
    const a = await account();
    const n = phone();
    await inbound("whatsapp", inboundIn(a.companyId, { source: n, text: "hello" }));
    const chat = await chatOf(a, n, "WHATSAPP");
    // Opted out of another channel only: the reply goes.
    expect((await a.api.post("/contacts/opt-outs", { channel: "SMS", phoneNumber: n })).status).toBe(201);
    expect((await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { text: "first" })).status).toBe(202);

    await inbound("whatsapp", inboundIn(a.companyId, { source: n, text: "STOP" }));
    const before = sent.length;
    const refused = await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { text: "are you sure?" });
    expectProblem(refused, 409);
    expect(refused.body.type).toBe("/docs#problem-recipient-opted-out");
    expect(sent.length).toBe(before);
    const thread = (await a.api.get(`/inbox/conversations/${chat.chatId}/messages?limit=100`)).body.data as Array<{ text: string }>;
    expect(thread.map((m) => m.text)).toEqual(["hello", "first", "STOP"]);

    await inbound("whatsapp", inboundIn(a.companyId, { source: n, text: "START" }));
    expect((await a.api.post(`/inbox/conversations/${chat.chatId}/messages`, { text: "welcome back" })).status).toBe(202);
    expect(sent.length).toBe(before + 1);
  });
});

describe("without a contacts node", () => {
  it("answers 503 with Retry-After to a keyword message (nothing stored) and to an opt-out report; other messages are stored", async () => {
    const alone = await startTestApp({ services: ["tracking", "inbox"], db: t.db });
    try {
      const companyId = `alone-${Date.now()}`;
      const stop = inboundIn(companyId, { text: "STOP" });
      const res = await alone.ingress.post("/inbound/whatsapp", [inboundIn(companyId, { text: "hi" }), stop]);
      expectProblem(res, 503);
      expect(res.headers.get("retry-after")).toBe("5");
      expect((await inboundEvents(companyId)).length).toBe(0);
      expect((await alone.ingress.post("/inbound/whatsapp", inboundIn(companyId, { text: "hi" }))).status).toBe(202);
      const report = await alone.ingress.post("/opt-outs", { companyId, channel: "SMS", phoneNumber: phone(), action: "OPT_OUT", at: at(0) });
      expectProblem(report, 503);
      expect(report.headers.get("retry-after")).toBe("5");
    } finally {
      await alone.app.stop();
    }
  });
});
