/**
 * UPSTREAM_MODE=http against a local HTTP upstream that fails sometimes: every message is POSTed to
 * its channel's URL with `Idempotency-Key` = its customerMessageId; a failed message (a 503, an
 * answer slower than UPSTREAM_TIMEOUT_MS) is tried again after a backoff and ends FAILED after 3
 * attempts; a batch window mostly failed pauses the campaign with a pauseReason, and resuming it
 * once the upstream is back sends the rest.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { campaignIn, seedList, untilStatus } from "../helpers/campaigns";
import { eventually } from "../helpers/eventually";

type Answer = "ok" | "fail" | "hang" | "400" | "429";
type Behaviour = (key: string, nth: number, seenKeys: number) => Answer;

let t: TestApp;
let a: Account;
let server: Server;
let behave: Behaviour = () => "ok";
const requests: Array<{ key: string; path: string; body: any; answered: Answer; at: number }> = [];
const attempts = new Map<string, number>();

const read = (req: IncomingMessage) =>
  new Promise<string>((resolve) => {
    let s = "";
    req.on("data", (c) => (s += c));
    req.on("end", () => resolve(s));
  });

beforeAll(async () => {
  server = createServer(async (req, res) => {
    const key = String(req.headers["idempotency-key"] ?? "");
    const body = JSON.parse(await read(req));
    const nth = (attempts.get(key) ?? 0) + 1;
    attempts.set(key, nth);
    const answered = behave(key, nth, attempts.size);
    requests.push({ key, path: req.url ?? "", body, answered, at: Date.now() });
    if (answered === "hang") return; // never answers: the client's answer time-out ends it
    if (answered === "429") return res.writeHead(429, { "retry-after": "4" }).end();
    res.writeHead(answered === "ok" ? 202 : answered === "400" ? 400 : 503).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  t = await startTestApp({
    services: ["gateway", "auth", "contacts", "campaigns", "tracking"],
    config: {
      upstreamMode: "http",
      upstreamSmsUrl: `${base}/sms`,
      upstreamRcsUrl: `${base}/rcs`,
      upstreamWhatsappUrl: `${base}/whatsapp`,
      upstreamTimeoutMs: 300,
      upstreamConnectTimeoutMs: 300,
      campaignPollMs: 50,
      rateLimitRps: 10000,
    },
  });
  a = await t.newAccount(["CAMPAIGNS", "CONTACTS", "SMS", "WHATSAPP"]);
}, 60_000);
afterAll(async () => {
  await t?.stop();
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
});

const recipients = (id: string) =>
  t.db.sequelize.query<{ contact_id: string; status: string; attempts: number; error: string | null }>(
    `SELECT contact_id, status, attempts, error FROM campaign_recipients WHERE campaign_id = $1 ORDER BY contact_id`,
    { bind: [id], type: QueryTypes.SELECT },
  );

it("retries failed messages with backoff, ends one FAILED after 3 attempts, and sends each with its Idempotency-Key", async () => {
  const { listId } = await seedList(a.api, 10);
  // The first two messages seen fail once (one a 503, one too slow), the third always fails.
  const order: string[] = [];
  behave = (key, nth) => {
    if (!order.includes(key)) order.push(key);
    const i = order.indexOf(key);
    if (i === 2) return "fail";
    if (i === 0 && nth === 1) return "fail";
    if (i === 1 && nth === 1) return "hang";
    return "ok";
  };
  const c = (await a.api.post("/campaigns", campaignIn([listId], { channel: "WHATSAPP", message: { text: "Hi {{firstName}}" } }))).body;
  await a.api.put(`/campaigns/${c.id}/confirm`);
  const done = await untilStatus(a, c.id, "SENT", 40_000);
  expect(done.progress).toEqual({ audience: 10, sent: 9, failed: 1, skipped: 0 });

  const mine = requests.filter((r) => r.key.startsWith(`cmp-${c.id}-`));
  expect(mine.every((r) => r.path === "/whatsapp" && r.body.customerMessageId === r.key && r.body.channel === "WHATSAPP" && r.body.campaignId === c.id)).toBe(
    true,
  );
  const byKey = new Map<string, string[]>();
  for (const r of mine) byKey.set(r.key, [...(byKey.get(r.key) ?? []), r.answered]);
  expect(byKey.size).toBe(10);
  expect(byKey.get(order[0]!)).toEqual(["fail", "ok"]);
  expect(byKey.get(order[1]!)).toEqual(["hang", "ok"]);
  expect(byKey.get(order[2]!)).toEqual(["fail", "fail", "fail"]);
  // Exactly one accepted request per recipient that was sent.
  expect([...byKey.values()].filter((answers) => answers.filter((x) => x === "ok").length === 1)).toHaveLength(9);
  const rows = await recipients(c.id);
  const failed = rows.filter((r) => r.status === "FAILED");
  expect(failed).toEqual([{ contact_id: order[2]!.slice(`cmp-${c.id}-`.length), status: "FAILED", attempts: 3, error: "HTTP 503" }]);
}, 60_000);

it("pauses a campaign by itself when most of a batch window fails, and sends the rest once resumed", async () => {
  const { listId } = await seedList(a.api, 6);
  behave = () => "fail";
  const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;
  await a.api.put(`/campaigns/${c.id}/confirm`);
  const paused = await untilStatus(a, c.id, "PAUSED");
  expect(paused.pauseReason).toMatch(/6 of the last 6 messages failed/);
  expect(paused.progress).toEqual({ audience: 6, sent: 0, failed: 0, skipped: 0 });
  const before = requests.length;
  await new Promise((r) => setTimeout(r, 2500)); // past the first backoff: a paused campaign sends nothing
  expect(requests.length).toBe(before);
  behave = () => "ok";
  expect((await a.api.put(`/campaigns/${c.id}/resume`)).status).toBe(200);
  const done = await untilStatus(a, c.id, "SENT", 20_000);
  expect(done.progress).toEqual({ audience: 6, sent: 6, failed: 0, skipped: 0 });
  await eventually(async () => expect((await recipients(c.id)).every((r) => r.status === "SENT" && r.attempts === 2)).toBe(true));
}, 60_000);

it("never hands test-list messages to the HTTP upstream: registers them with simulation: true and records them sent", async () => {
  behave = () => "ok";
  const { listId } = await seedList(a.api, 3, { list: { isTest: true } });
  const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;
  await a.api.put(`/campaigns/${c.id}/confirm`);
  const done = await untilStatus(a, c.id, "SENT", 20_000);
  expect(done.progress).toEqual({ audience: 3, sent: 3, failed: 0, skipped: 0 });
  expect(requests.filter((r) => r.key.startsWith(`cmp-${c.id}-`))).toEqual([]);
  const rows = await t.db.sequelize.query<{ simulation: boolean }>(`SELECT simulation FROM messages WHERE campaign_id = $1`, {
    bind: [c.id],
    type: QueryTypes.SELECT,
  });
  expect(rows).toEqual([{ simulation: true }, { simulation: true }, { simulation: true }]);
  expect((await recipients(c.id)).every((r) => r.status === "SENT" && r.attempts === 1)).toBe(true);
}, 60_000);

it("fails a message at once on a 4xx other than 408/429, and waits a 429's Retry-After before trying again", async () => {
  const { listId } = await seedList(a.api, 6);
  const order: string[] = [];
  behave = (key, nth) => {
    if (!order.includes(key)) order.push(key);
    const i = order.indexOf(key);
    if (i === 0) return "400";
    if (i === 1 && nth === 1) return "429";
    return "ok";
  };
  const c = (await a.api.post("/campaigns", campaignIn([listId]))).body;
  await a.api.put(`/campaigns/${c.id}/confirm`);
  const done = await untilStatus(a, c.id, "SENT", 30_000);
  expect(done.progress).toEqual({ audience: 6, sent: 5, failed: 1, skipped: 0 });
  const mine = requests.filter((r) => r.key.startsWith(`cmp-${c.id}-`));
  expect(mine.filter((r) => r.key === order[0]).map((r) => r.answered)).toEqual(["400"]);
  const limited = mine.filter((r) => r.key === order[1]);
  expect(limited.map((r) => r.answered)).toEqual(["429", "ok"]);
  expect(limited[1]!.at - limited[0]!.at).toBeGreaterThanOrEqual(3900); // Retry-After: 4, past the 2 s backoff
  const failed = (await recipients(c.id)).filter((r) => r.status === "FAILED");
  expect(failed).toEqual([{ contact_id: order[0]!.slice(`cmp-${c.id}-`.length), status: "FAILED", attempts: 1, error: "HTTP 400" }]);
}, 60_000);
