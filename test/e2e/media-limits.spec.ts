/**
 * Media uploads at the edges of what a header or a request may claim: dimensions and durations past
 * what the columns hold (kept as null, never a 500), a declared Content-Length past the kind's limit
 * (413 as soon as the kind is known), the gateway's upload tokens (only live ones read), and the
 * spool's fairness (contract section 9): an upload that trickles is ended with 408, and one account
 * reserves at most a quarter of the spool (then 429, while another account's upload goes on).
 */
import http from "node:http";
import net from "node:net";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { mp4, mp4OfSize, png, uploadMedia } from "../helpers/media";

const MIB = 1024 * 1024;
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "media"] });
});
afterAll(() => t?.stop());

describe("media: headers claiming more than the columns hold", () => {
  it("stores a PNG whose IHDR claims a width past 2^31-1 with width and height null (201, not 500)", async () => {
    const a = await t.newAccount(["MEDIA"]);
    const bytes = png(1, 1);
    bytes.writeUInt32BE(0xffffffff, 16); // IHDR width (the CRC no longer matches: never checked, never decoded)
    const res = await uploadMedia(a, bytes, "wide.png");
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ kind: "image", width: null, height: null });
  });

  it("stores an MP4 whose mvhd (version 1) claims a duration past 2^53 ms with durationMs null (201, not 500)", async () => {
    const a = await t.newAccount(["MEDIA"]);
    const v0 = mp4(1000);
    const at = v0.indexOf("mvhd") + 4;
    // Version 1: creation and modification times of 8 bytes each, timescale, a 64-bit duration.
    const mvhd = Buffer.alloc(112);
    mvhd[0] = 1;
    mvhd.writeUInt32BE(1, 20); // timescale: seconds
    mvhd.writeBigUInt64BE(0xfffffffffffffff0n, 24);
    const moovAt = v0.indexOf("moov") - 4;
    const moov = Buffer.concat([Buffer.alloc(8), Buffer.alloc(8), mvhd]);
    moov.writeUInt32BE(moov.length, 0);
    moov.write("moov", 4, "latin1");
    moov.writeUInt32BE(8 + mvhd.length, 8);
    moov.write("mvhd", 12, "latin1");
    expect(at).toBeGreaterThan(moovAt);
    const bytes = Buffer.concat([v0.subarray(0, moovAt), moov]);
    const res = await uploadMedia(a, bytes, "long.mp4");
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ kind: "video", durationMs: null });
  });
});

describe("media: a declared length past the kind's limit", () => {
  it("answers 413 as soon as the head shows an image whose Content-Length passes 5 MiB and the envelope, before reading on", async () => {
    const a = await t.newAccount(["MEDIA"]);
    const boundary = "----pgwlimit";
    const head = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.png"\r\nContent-Type: image/png\r\n\r\n`),
      png(1, 1).subarray(0, 33),
      Buffer.alloc(64 * 1024, 0x41),
    ]);
    const started = Date.now();
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(`${a.api.baseUrl}/media`, {
        method: "POST",
        // 9 MiB: under the video limit (16 MiB), far past the image one (5 MiB) and the multipart envelope.
        headers: { "x-api-key": a.key.apiKey, "content-type": `multipart/form-data; boundary=${boundary}`, "content-length": String(9 * MIB) },
      });
      req.on("response", (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString("utf8") });
          req.destroy();
        });
      });
      req.on("error", reject);
      req.write(head); // the rest never comes: an answer that waited for 5 MiB of it would never come
    });
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body).detail).toMatch(/5 MiB, the limit for PNG/);
    expect(Date.now() - started).toBeLessThan(5000);
    expect((await a.api.get("/media")).body.total).toBe(0);
  });
});

describe("gateway.uploadRange", () => {
  it("reads only files under a live token: an unknown token is a clean 404 error, a malformed one a validation error", async () => {
    const call = (params: Record<string, unknown>) =>
      t.app.broker.call("gateway.uploadRange", params).then(
        () => null,
        (err: { code?: number; type?: string }) => ({ code: err.code, type: err.type }),
      );
    expect(await call({ token: "0".repeat(32), offset: 0, length: 10 })).toEqual({ code: 404, type: "NOT_FOUND" });
    expect((await call({ token: "../../etc/passwd", offset: 0, length: 10 }))?.code).toBe(422);
    expect((await call({ token: "0".repeat(32), offset: -1, length: 10 }))?.code).toBe(422);
    expect((await call({ token: "0".repeat(32), offset: 0, length: 512 * 1024 + 1 }))?.code).toBe(422);
  });

  it("drops the token once the upload's call has answered", async () => {
    const gateway = t.app.broker.getLocalService("gateway") as unknown as { spoolTokens: { size: number } };
    const a = await t.newAccount(["MEDIA"]);
    expect((await uploadMedia(a, png(2, 2), "a.png")).status).toBe(201);
    expect((await uploadMedia(a, "not an image", "b.png")).status).toBe(415);
    expect(gateway.spoolTokens.size).toBe(0);
  });
});

const BOUNDARY = "----pgwpace";
/** The multipart envelope of one file part named `name`, around `file`. */
const multipart = (file: Buffer, name: string) =>
  Buffer.concat([
    Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="${name}"\r\nContent-Type: application/octet-stream\r\n\r\n`),
    file,
    Buffer.from(`\r\n--${BOUNDARY}--\r\n`),
  ]);

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: any;
  /** Milliseconds from the first byte of the body sent to the end of the answer. */
  tookMs: number;
}

/**
 * POSTs /media over a raw socket (node:net): the headers (Content-Length `declared`), then `body`
 * `piece` bytes every `everyMs` until it is all sent or the gateway has answered. Answers what the
 * gateway said once it closed the connection, or status 0 when it said nothing within `giveUpMs`.
 */
function sendSlowly(a: Account, body: Buffer, opts: { declared: number; piece: number; everyMs: number; giveUpMs: number }): Promise<RawAnswer> {
  const url = new URL(`${a.api.baseUrl}/media`);
  return new Promise((resolve) => {
    const socket = net.connect(Number(url.port), url.hostname);
    const chunks: Buffer[] = [];
    let sent = 0;
    let started = 0;
    let timer: NodeJS.Timeout | undefined;
    const done = () => {
      clearInterval(timer);
      clearTimeout(giveUp);
      socket.destroy();
      const raw = Buffer.concat(chunks).toString("utf8");
      const [head = "", ...rest] = raw.split("\r\n\r\n");
      const [statusLine = "", ...lines] = head.split("\r\n");
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
      const text = rest.join("\r\n\r\n");
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine)?.[1] ?? 0);
      resolve({ status, headers, body: /json/.test(headers["content-type"] ?? "") ? JSON.parse(text) : text, tookMs: Date.now() - started });
    };
    const giveUp = setTimeout(done, opts.giveUpMs);
    socket.on("data", (c: Buffer) => chunks.push(c));
    socket.on("close", done);
    socket.on("error", () => undefined);
    socket.on("connect", () => {
      socket.write(
        `POST ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\nX-API-Key: ${a.key.apiKey}\r\nConnection: close\r\n` +
          `Content-Type: multipart/form-data; boundary=${BOUNDARY}\r\nContent-Length: ${opts.declared}\r\n\r\n`,
      );
      started = Date.now();
      timer = setInterval(() => {
        if (sent >= body.length || socket.destroyed) return clearInterval(timer);
        socket.write(body.subarray(sent, sent + opts.piece));
        sent += opts.piece;
      }, opts.everyMs);
    });
  });
}

type Ledger = { used(account?: string): number };
const spoolOf = (app: TestApp) => (app.app.broker.getLocalService("gateway") as unknown as { spoolBudget: Ledger }).spoolBudget;

describe("media: an upload that trickles", () => {
  // A shortened window: 16 KiB in every 1.5 s. The spool's share (a quarter of 8 MiB) is 2 MiB.
  const WINDOW_MS = 1500;
  const SHARE = 2 * MIB;
  let p: TestApp;
  beforeAll(async () => {
    p = await startTestApp({
      services: ["gateway", "auth", "media"],
      config: { uploadMinBytes: 16 * 1024, uploadMinWindowMs: WINDOW_MS, spoolMaxBytes: 4 * SHARE },
    });
  });
  afterAll(() => p?.stop());

  it("ends an upload that sends less than the minimum in a window with a 408 problem, and gives its spool reservation back", async () => {
    const a = await p.newAccount(["MEDIA"]);
    // Declares the account's whole share, then sends 16 bytes every 100 ms (160 bytes a second).
    const body = multipart(Buffer.concat([png(1, 1).subarray(0, 33), Buffer.alloc(SHARE, 0x41)]), "slow.png");
    const answer = await sendSlowly(a, body, { declared: SHARE, piece: 16, everyMs: 100, giveUpMs: WINDOW_MS * 6 });
    expect(answer.status).toBe(408);
    expect(answer.headers["content-type"]).toMatch(/^application\/problem\+json/);
    expect(answer.headers.connection).toBe("close");
    expect(answer.body).toMatchObject({ status: 408, type: "/docs#problem-upload-too-slow", requestId: answer.headers["x-request-id"] });
    expect(answer.body.detail).toMatch(/less than 16 KiB in 1500 ms/);
    // Not before a whole window, and soon after it.
    expect(answer.tookMs).toBeGreaterThanOrEqual(WINDOW_MS);
    expect(answer.tookMs).toBeLessThan(WINDOW_MS * 4);
    expect(spoolOf(p).used(a.companyId)).toBe(0);
    // The share it held is free again: the same account uploads at once.
    const next = await uploadMedia(a, png(2, 2), "next.png");
    expect(next.status).toBe(201);
    expect((await a.api.get("/media")).body.total).toBe(1);
  });

  it("keeps an upload that is slow but sends the minimum in every window", async () => {
    const a = await p.newAccount(["MEDIA"]);
    // 40 KiB a second, for about two windows.
    const body = multipart(mp4OfSize(120 * 1024), "steady.mp4");
    const answer = await sendSlowly(a, body, { declared: body.length, piece: 4096, everyMs: 100, giveUpMs: 20_000 });
    expect(answer.status).toBe(201);
    expect(answer.tookMs).toBeGreaterThan(WINDOW_MS);
    expect(answer.body).toMatchObject({ kind: "video", size: 120 * 1024 });
  });
});

describe("media: one account's share of the spool", () => {
  // The default share (a quarter) of a 16 MiB spool: 4 MiB. Held uploads are never ended for their pace here.
  const SPOOL = 16 * MIB;
  let q: TestApp;
  beforeAll(async () => {
    q = await startTestApp({ services: ["gateway", "auth", "media"], config: { spoolMaxBytes: SPOOL, uploadMinBytes: 0 } });
  });
  afterAll(() => q?.stop());

  /** An upload that declares `length` bytes and sends only its head, held open until destroyed. */
  const holdUpload = (acct: Account, length: number) => {
    const req = http.request(`${acct.api.baseUrl}/media`, {
      method: "POST",
      headers: { "x-api-key": acct.key.apiKey, "content-type": `multipart/form-data; boundary=${BOUNDARY}`, "content-length": String(length) },
    });
    req.on("error", () => undefined);
    req.write(multipart(png(1, 1).subarray(0, 33), "held.png").subarray(0, -(BOUNDARY.length + 8)));
    return req;
  };

  it("answers an account past a quarter of the spool 429 with Retry-After (never 503), while another account's upload is served", async () => {
    const [a, b] = await Promise.all([q.newAccount(["MEDIA"]), q.newAccount(["MEDIA"])]);
    const held = Array.from({ length: 4 }, () => holdUpload(a, MIB));
    try {
      await eventually(() => expect(spoolOf(q).used(a.companyId)).toBe(4 * MIB));
      // Declared or sent as a stream (the reservation then grows with the file), the next one is past the share.
      const declared = await uploadMedia(a, png(2, 2), "more.png");
      expectProblem(declared, 429);
      expect(declared.body.type).toBe("/docs#problem-upload-share-exceeded");
      expect(Number(declared.headers.get("retry-after"))).toBeGreaterThan(0);
      const bytes = multipart(png(2, 2), "streamed.png");
      const streamed = await fetch(`${a.api.baseUrl}/media`, {
        method: "POST",
        headers: { "x-api-key": a.key.apiKey, "content-type": `multipart/form-data; boundary=${BOUNDARY}` },
        body: new ReadableStream<Uint8Array>({ start: (ctl) => (ctl.enqueue(bytes), ctl.close()) }),
        duplex: "half",
      } as RequestInit);
      expectProblem({ status: streamed.status, headers: streamed.headers, body: await streamed.json() }, 429);
      expect(Number(streamed.headers.get("retry-after"))).toBeGreaterThan(0);
      // The node's spool has room left, and another account uses it: served at once.
      const started = Date.now();
      const other = await uploadMedia(b, png(3, 3), "other.png");
      expect(other.status).toBe(201);
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      for (const r of held) r.destroy();
    }
    // Its uploads ended, the account has its share again.
    await eventually(() => expect(spoolOf(q).used()).toBe(0));
    expect((await uploadMedia(a, png(2, 2), "again.png")).status).toBe(201);
  });
});
