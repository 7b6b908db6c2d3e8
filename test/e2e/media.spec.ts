import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, utimesSync, writeFileSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";
import { gif, jpeg, mediaForm, mp4, mp4OfSize, png, pngOfSize, readContent, uploadMedia, webp } from "../helpers/media";

const MIB = 1024 * 1024;
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "media"], config: { mediaAccountMaxBytes: 20 * MIB } });
});
afterAll(() => t?.stop());

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const onDisk = (id: string) => path.join(t.config.mediaDir, id);
const account = () => t.newAccount(["MEDIA"]);

describe("media: upload", () => {
  it.each([
    ["JPEG", jpeg(7, 6), "photo.jpg", { contentType: "image/jpeg", kind: "image", width: 7, height: 6, durationMs: null }],
    ["PNG", png(3, 2), "logo.png", { contentType: "image/png", kind: "image", width: 3, height: 2, durationMs: null }],
    ["GIF", gif(5, 4), "anim.gif", { contentType: "image/gif", kind: "image", width: 5, height: 4, durationMs: null }],
    ["WEBP", webp(9, 8), "pic.webp", { contentType: "image/webp", kind: "image", width: 9, height: 8, durationMs: null }],
    ["MP4", mp4(2500), "clip.mp4", { contentType: "video/mp4", kind: "video", width: null, height: null, durationMs: 2500 }],
  ])("stores a %s judged by its bytes, with what its header says, and keeps the file", async (_name, bytes, fileName, expected) => {
    const a = await account();
    // The declared name says nothing: a JPEG named .txt is still a JPEG.
    const res = await uploadMedia(a, bytes, fileName.replace(/\.\w+$/, ".txt"));
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      mediaKey: `media/${res.body.id}`,
      fileName: fileName.replace(/\.\w+$/, ".txt"),
      size: bytes.length,
      sha256: sha(bytes),
      createdAt: expect.any(String),
      ...expected,
    });
    expect(res.headers.get("location")).toMatch(new RegExp(`/media/${res.body.id}$`));
    expect(readFileSync(onDisk(res.body.id)).equals(bytes)).toBe(true);
    expect((await a.api.get(`/media/${res.body.id}`)).body).toEqual(res.body);
  });

  it("reads an MP4's duration from an mvhd after a large mdat, and accepts a video of 16 MiB while refusing 16 MiB + 1", async () => {
    const a = await account();
    const ok = await uploadMedia(a, mp4OfSize(16 * MIB, 61_000), "long.mp4");
    expect(ok.body).toMatchObject({ size: 16 * MIB, durationMs: 61_000 });
    expect(ok.status).toBe(201);
    const b = await account();
    const over = await uploadMedia(b, mp4OfSize(16 * MIB + 1), "long.mp4");
    expectProblem(over, 413);
    expect((await b.api.get("/media")).body.total).toBe(0);
  });

  it("accepts an image of exactly 5 MiB and a video over 5 MiB, refuses an image of 5 MiB + 1 byte", async () => {
    const a = await account();
    expect((await uploadMedia(a, pngOfSize(5 * MIB), "big.png")).status).toBe(201);
    expect((await uploadMedia(a, mp4OfSize(6 * MIB), "six.mp4")).status).toBe(201);
    const res = await uploadMedia(a, pngOfSize(5 * MIB + 1), "big.png");
    expectProblem(res, 413);
    expect(res.body.detail).toMatch(/5 MiB.*PNG/);
    expect((await a.api.get("/media")).body.total).toBe(2);
  });

  it("cuts a chunked image (no Content-Length) with a 413 as soon as it passes 5 MiB", async () => {
    const a = await account();
    const boundary = "----pgwmedia";
    const head = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="huge.png"\r\nContent-Type: image/png\r\n\r\n`),
      png(1, 1).subarray(0, 33),
    ]);
    const chunk = Buffer.alloc(MIB, 0x41);
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(c) {
        if (sent === 0) c.enqueue(head);
        // 12 MiB of image: under the video limit, far over the image one; past 7 MiB the client slows
        // down, so an answer that waited for the whole body would come only after it.
        if (sent > 7) await new Promise((res) => setTimeout(res, 1500));
        if (sent++ < 12) c.enqueue(chunk);
        else {
          c.enqueue(Buffer.from(`\r\n--${boundary}--\r\n`));
          c.close();
        }
      },
    });
    const r = await fetch(`${a.api.baseUrl}/media`, {
      method: "POST",
      headers: { "x-api-key": a.key.apiKey, "content-type": `multipart/form-data; boundary=${boundary}` },
      body,
      duplex: "half",
    } as RequestInit);
    expect(r.status).toBe(413);
    expect(sent).toBeLessThanOrEqual(9); // answered while the body was still coming
    expect(((await r.json()) as { detail: string }).detail).toMatch(/5 MiB, the limit for PNG/);
    expect((await a.api.get("/media")).body.total).toBe(0);
  });

  it("answers 413 at once when Content-Length is past the largest file and its envelope, before reading the body", async () => {
    const a = await account();
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request(`${a.api.baseUrl}/media`, {
        method: "POST",
        headers: { "x-api-key": a.key.apiKey, "content-type": "multipart/form-data; boundary=x", "content-length": String(40 * MIB) },
      });
      req.on("response", (res) => {
        res.resume();
        resolve(res.statusCode!);
        req.destroy();
      });
      req.on("error", (err) => reject(err));
      req.write("--x\r\n"); // the rest is never sent: the answer cannot wait for it
    });
    expect(status).toBe(413);
    expect((await a.api.get("/media")).body.total).toBe(0);
  });

  it.each([
    ["a text file named .png", "hello, this is text\n", "fake.png", /this one is text\b/],
    ["a PDF", "%PDF-1.7\n1 0 obj\n<< /Type /Catalog >>\nendobj\n", "doc.png", /PDF document \(application\/pdf\)/],
    ["an HTML page", "<!DOCTYPE html><html><body><script>alert(1)</script></body></html>", "page.jpg", /SVG\/HTML text \(text\/html\)/],
    [
      "an SVG image",
      '<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"></svg>',
      "pic.svg",
      /SVG\/HTML text \(image\/svg\+xml\)/,
    ],
    ["a QuickTime movie", Buffer.concat([Buffer.from("00000014667479707174202000000200", "hex"), Buffer.alloc(40)]), "m.mp4", /QuickTime/],
  ])("answers 415 naming what was found for %s, and stores nothing", async (_name, body, fileName, detail) => {
    const a = await account();
    const res = await uploadMedia(a, typeof body === "string" ? body : body, fileName);
    expectProblem(res, 415);
    expect(res.body.detail).toMatch(detail);
    expect(res.body.detail).toMatch(/JPEG, PNG, GIF, WEBP, MP4/);
    expect((await a.api.get("/media")).body.total).toBe(0);
  });

  it.each([
    ["no file", () => uploadForm(null)],
    ["an empty file", () => uploadForm(Buffer.alloc(0))],
    ["two files", () => uploadForm(png(), (f) => f.append("file", new Blob([new Uint8Array(png())]), "b.png"))],
    ["a stray field", () => uploadForm(png(), (f) => f.append("caption", "hello"))],
    ["the file as a text field", () => uploadForm(null, (f) => f.append("file", "not a file"))],
  ])("answers 400 for %s", async (_name, make) => {
    const a = await account();
    const res = await a.api.request("POST", "/media", { form: make() });
    expectProblem(res, 400);
    expect((await a.api.get("/media")).body.total).toBe(0);
  });

  it("answers 400 for a truncated multipart body, 415 for a body that is not multipart", async () => {
    const a = await account();
    const boundary = "----cut";
    const raw = Buffer.concat([Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\n\r\n`), png()]);
    const res = await a.api.request("POST", "/media", { raw, headers: { "content-type": `multipart/form-data; boundary=${boundary}` } });
    expectProblem(res, 400);
    expectProblem(await a.api.post("/media", { file: "x" }), 415);
    expect((await a.api.get("/media")).body.total).toBe(0);
  });

  it("refuses an upload past the account's MEDIA_ACCOUNT_MAX_BYTES with a 413 saying so; other accounts are not affected", async () => {
    const a = await account();
    expect((await uploadMedia(a, mp4OfSize(16 * MIB), "a.mp4")).status).toBe(201);
    const res = await uploadMedia(a, pngOfSize(4.5 * MIB), "b.png");
    expectProblem(res, 413);
    expect(res.body.detail).toMatch(/account's media take 16 MiB of the 20 MiB/);
    await expect(readdirIds(a)).resolves.toHaveLength(1);
    expect((await uploadMedia(await account(), pngOfSize(4.5 * MIB), "b.png")).status).toBe(201);
  });

  it("keeps no file for an upload refused by the account's bound while another was being stored (one row, one file)", async () => {
    const a = await account();
    const before = readdirSync(t.config.mediaDir).length;
    const results = await Promise.all([uploadMedia(a, mp4OfSize(12 * MIB), "1.mp4"), uploadMedia(a, mp4OfSize(12 * MIB, 2000), "2.mp4")]);
    expect(results.map((r) => r.status).sort()).toEqual([201, 413]);
    expect((await a.api.get("/media")).body.total).toBe(1);
    expect(readdirSync(t.config.mediaDir).length).toBe(before + 1);
  });

  it("honours Idempotency-Key: a repeat answers the same media and stores nothing twice; another file with the key is a 422", async () => {
    const a = await account();
    const headers = { "idempotency-key": "media-1" };
    const first = await a.api.request("POST", "/media", { form: mediaForm(png(), "a.png"), headers });
    expect(first.status).toBe(201);
    const again = await a.api.request("POST", "/media", { form: mediaForm(png(), "a.png"), headers });
    expect(again.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expectProblem(await a.api.request("POST", "/media", { form: mediaForm(gif(), "a.png"), headers }), 422);
    expect((await a.api.get("/media")).body.total).toBe(1);
  });

  it("counts uploads by outcome and the bytes stored, and the uploads the gateway refused, in /metrics", async () => {
    const a = await account();
    const before = await t.root.get("/metrics");
    expect((await uploadMedia(a, png(), "a.png")).status).toBe(201);
    expect((await uploadMedia(a, "text", "a.png")).status).toBe(415);
    const after = await t.root.get("/metrics");
    const value = (text: string, re: RegExp) => Number(re.exec(text)?.[1] ?? 0);
    const stored = /^media_uploads_total\{outcome="stored"\} (\d+)/m;
    const refused = /^upload_rejections_total\{action="media.upload",status="415"\} (\d+)/m;
    expect(value(after.text, stored)).toBe(value(before.text, stored) + 1);
    expect(value(after.text, refused)).toBe(value(before.text, refused) + 1);
    const [{ bytes }] = (await t.db.sequelize.query(`SELECT sum(size)::bigint AS bytes FROM media`, { type: QueryTypes.SELECT })) as [{ bytes: string }];
    // The gauge is read from the database at a scrape (one read serves the scrapes of the next 100 ms).
    await eventually(async () => expect(value((await t.root.get("/metrics")).text, /^media_stored_bytes (\d+)/m)).toBe(Number(bytes)));
  });

  it("needs a key with MEDIA", async () => {
    const other = await t.newAccount(["CONTACTS"]);
    expectProblem(await uploadMedia(other, png(), "a.png"), 401);
    expectProblem(await other.api.get("/media"), 401);
  });
});

function uploadForm(file: Buffer | null, more?: (f: FormData) => void): FormData {
  const f = new FormData();
  if (file) f.append("file", new Blob([new Uint8Array(file)]), "a.png");
  more?.(f);
  return f;
}

async function readdirIds(a: Account): Promise<string[]> {
  return (await a.api.get("/media?limit=1000")).body.data.map((m: { id: string }) => m.id);
}

describe("media: list, get, delete", () => {
  it("lists newest first in the page envelope; a limit past 1000 or a negative page is a 400", async () => {
    const a = await account();
    const ids: string[] = [];
    for (const f of [png(), gif(), jpeg()]) ids.push((await uploadMedia(a, f, "x")).body.id);
    const page = await a.api.get("/media?limit=2");
    expect(page.status).toBe(200);
    expect(page.body).toMatchObject({ page: 0, limit: 2, total: 3, totalPages: 2 });
    expect(page.body.data.map((m: { id: string }) => m.id)).toEqual([ids[2], ids[1]]);
    expect((await a.api.get("/media?limit=2&page=1")).body.data.map((m: { id: string }) => m.id)).toEqual([ids[0]]);
    expectProblem(await a.api.get("/media?limit=1001"), 400);
    expectProblem(await a.api.get("/media?page=-1"), 400);
    expectProblem(await a.api.get("/media?sortBy=size"), 400);
  });

  it("deletes the media and its file; then it is a 404", async () => {
    const a = await account();
    const { id } = (await uploadMedia(a, png(), "a.png")).body;
    expect(existsSync(onDisk(id))).toBe(true);
    const del = await a.api.delete(`/media/${id}`);
    expect(del.status).toBe(204);
    expect(existsSync(onDisk(id))).toBe(false);
    expectProblem(await a.api.get(`/media/${id}`), 404);
    expectProblem(await a.api.delete(`/media/${id}`), 404);
    expect((await readContent(a, id)).status).toBe(404);
  });

  it("the media service's sweep (at start, then hourly) removes old files no row names and old temp files, never young ones or those with rows", async () => {
    const media = t.app.broker.getLocalService("media") as unknown as { sweepOrphans(): Promise<number> };
    const dir = t.config.mediaDir;
    const a = await account();
    const kept = (await uploadMedia(a, png(), "a.png")).body.id;
    // Deleted while its node was away: the row is gone, the file stayed (an old mtime, however recent the node's return).
    const deleted = (await uploadMedia(a, gif(), "b.gif")).body.id;
    await t.db.sequelize.query(`DELETE FROM media WHERE id = $1`, { bind: [deleted] });
    const orphan = "00000000-0000-4000-8000-00000000000a";
    const young = "00000000-0000-4000-8000-00000000000b";
    for (const name of [orphan, young, `${orphan}.part`, "notes.txt"]) writeFileSync(path.join(dir, name), "x");
    const old = new Date(Date.now() - 2 * 3600_000);
    for (const name of [kept, deleted, orphan, `${orphan}.part`, "notes.txt"]) utimesSync(path.join(dir, name), old, old);
    expect(await media.sweepOrphans()).toBe(3);
    const left = readdirSync(dir);
    expect(left).toEqual(expect.arrayContaining([kept, young, "notes.txt"]));
    for (const name of [deleted, orphan, `${orphan}.part`]) expect(left).not.toContain(name);
    expect(readFileSync(onDisk(kept)).equals(png())).toBe(true);
  });

  it("answers 404 for another account's media on every route, and changes nothing", async () => {
    const a = await account();
    const b = await account();
    const bytes = png();
    const { id } = (await uploadMedia(a, bytes, "a.png")).body;
    expectProblem(await b.api.get(`/media/${id}`), 404);
    expectProblem(await b.api.delete(`/media/${id}`), 404);
    const content = await readContent(b, id);
    expect(content.status).toBe(404);
    expect(content.headers.get("content-type")).toMatch(/problem\+json/);
    expect((await b.api.get("/media")).body.total).toBe(0);
    expect((await a.api.get(`/media/${id}`)).status).toBe(200);
    expect(readFileSync(onDisk(id)).equals(bytes)).toBe(true);
    expectProblem(await a.api.get(`/media/not-a-uuid`), 400);
    expectProblem(await a.api.get(`/media/00000000-0000-4000-8000-000000000000`), 404);
  });
});

describe("media: content", () => {
  it("streams the exact bytes with the detected type, ETag, nosniff, a safe Content-Disposition and Accept-Ranges", async () => {
    const a = await account();
    const bytes = gif(2, 2);
    // FormData sends `"` and line breaks in a file name as %22, %0D, %0A; the name is kept as received.
    const { id, fileName } = (await uploadMedia(a, bytes, 'evil"\r\nX-Injected: 1 été.gif')).body;
    const r = await readContent(a, id);
    expect(r.status).toBe(200);
    expect(r.bytes.equals(bytes)).toBe(true);
    expect(r.headers.get("content-type")).toBe("image/gif");
    expect(r.headers.get("content-length")).toBe(String(bytes.length));
    expect(r.headers.get("etag")).toBe(`"${sha(bytes)}"`);
    expect(r.headers.get("accept-ranges")).toBe("bytes");
    expect(r.headers.get("cache-control")).toBe("private");
    expect(r.headers.get("x-content-type-options")).toBe("nosniff");
    expect(r.headers.get("x-injected")).toBeNull();
    const disposition = r.headers.get("content-disposition")!;
    expect(disposition).toMatch(/^inline; filename="[A-Za-z0-9._ -]+"; filename\*=UTF-8''[A-Za-z0-9%._~!-]+$/);
    expect(fileName).toMatch(/été\.gif$/);
    expect(decodeURIComponent(disposition.split("''")[1]!)).toBe(fileName);
  });

  it("answers 304 without a body to If-None-Match with the ETag (or *), 200 to another tag", async () => {
    const a = await account();
    const bytes = png();
    const { id } = (await uploadMedia(a, bytes, "a.png")).body;
    const etag = `"${sha(bytes)}"`;
    for (const tag of [etag, `W/${etag}`, `"other", ${etag}`, "*"]) {
      const r = await readContent(a, id, { "if-none-match": tag });
      expect(r.status).toBe(304);
      expect(r.bytes.length).toBe(0);
      expect(r.headers.get("etag")).toBe(etag);
    }
    const other = await readContent(a, id, { "if-none-match": '"abc"' });
    expect(other.status).toBe(200);
    expect(other.bytes.equals(bytes)).toBe(true);
  });

  it("answers one byte range with 206 and exactly those bytes; several ranges with the whole file; past the end 416", async () => {
    const a = await account();
    const bytes = mp4(1000, 5000);
    const { id } = (await uploadMedia(a, bytes, "v.mp4")).body;
    const size = bytes.length;
    for (const [range, start, end] of [
      ["bytes=2-9", 2, 9],
      ["bytes=100-", 100, size - 1],
      ["bytes=-16", size - 16, size - 1],
      ["bytes=10-999999", 10, size - 1],
      ["bytes=-999999", 0, size - 1],
    ] as const) {
      const r = await readContent(a, id, { range });
      expect(r.status).toBe(206);
      expect(r.headers.get("content-range")).toBe(`bytes ${start}-${end}/${size}`);
      expect(r.headers.get("content-length")).toBe(String(end - start + 1));
      expect(r.headers.get("content-type")).toBe("video/mp4");
      expect(r.bytes.equals(bytes.subarray(start, end + 1))).toBe(true);
    }
    const many = await readContent(a, id, { range: "bytes=0-1,5-6" });
    expect(many.status).toBe(200);
    expect(many.bytes.equals(bytes)).toBe(true);
    const junk = await readContent(a, id, { range: "pages=1-2" });
    expect(junk.status).toBe(200);
    for (const range of [`bytes=${size}-`, `bytes=${size + 10}-${size + 20}`, "bytes=-0"]) {
      const r = await readContent(a, id, { range });
      expect(r.status).toBe(416);
      expect(r.headers.get("content-range")).toBe(`bytes */${size}`);
      expect(r.headers.get("content-type")).toMatch(/problem\+json/);
    }
  });
});
