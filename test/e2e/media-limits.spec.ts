/**
 * Media uploads at the edges of what a header or a request may claim: dimensions and durations past
 * what the columns hold (kept as null, never a 500), a declared Content-Length past the kind's limit
 * (413 as soon as the kind is known), and the gateway's upload tokens (only live ones read).
 */
import http from "node:http";
import { startTestApp, type TestApp } from "../helpers/app";
import { mp4, png, uploadMedia } from "../helpers/media";

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
