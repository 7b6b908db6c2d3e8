/**
 * Media split over real NATS, as operators run them: two gateway nodes (A with auth, B alone) and a
 * media node with a MEDIA_DIR of its own. A file uploaded through gateway A is kept on the media
 * node and read back through gateway B, whole and by range, pulled from the media node range by
 * range (lib/http/remote-file.ts): no gateway holds the file.
 *
 * Never held whole in memory, by design: gateway A's busboy part stream is piped (back-pressured)
 * into a spool file, kept under a token while the call runs; the media node pulls it into its temp
 * file range by range (gateway.uploadRange, one RANGE_BYTES piece in flight); reads go
 * back in RANGE_BYTES pieces, one in flight at a time. The test checks the spool is emptied after each upload and that the
 * media node's file is byte-identical.
 */
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { QueryTypes } from "sequelize";
import { RANGE_BYTES, type RemoteFile } from "../../lib/http/remote-file";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { mp4OfSize, png, readContent, uploadMedia } from "../helpers/media";

describeOverNats("media over NATS", () => {
  let tdb: TestDatabase;
  let gatewayA: TestApp;
  let gatewayB: TestApp;
  let media: TestApp;
  let media2: TestApp | null = null;
  const namespace = uid("media");

  const mediaNodes = (on: TestApp) =>
    (on.app.broker.registry.getServiceList({ onlyAvailable: true }) as Array<{ name: string; nodeID: string }>)
      .filter((s) => s.name === "media")
      .map((s) => s.nodeID);

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const cluster = { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url };
    media = await startTestApp({ services: ["media"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-media` } });
    gatewayA = await startTestApp({ services: ["gateway", "auth"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-gwa` } });
    gatewayB = await startTestApp({ services: ["gateway"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-gwb` } });
    for (const gw of [gatewayA, gatewayB]) await eventually(() => expect(mediaNodes(gw)).toEqual([`${namespace}-media`]));
    // The media node pulls uploads from the gateway that received them (gateway.uploadRange): it knows both.
    const gatewayNodes = () =>
      (media.app.broker.registry.getServiceList({ onlyAvailable: true }) as Array<{ name: string; nodeID: string }>)
        .filter((s) => s.name === "gateway")
        .map((s) => s.nodeID)
        .sort();
    await eventually(() => expect(gatewayNodes()).toEqual([`${namespace}-gwa`, `${namespace}-gwb`]));
    // Both gateways have built their media routes (401 without a key, not 404).
    for (const gw of [gatewayA, gatewayB]) await eventually(async () => expect((await gw.api.get("/media")).status).toBe(401));
  }, 60_000);

  afterAll(async () => {
    await media2?.stop();
    await gatewayB?.stop();
    await gatewayA?.stop();
    await media?.stop();
    await tdb?.drop();
  });

  it("keeps a file uploaded through gateway A on the media node and serves it through gateway B, whole and by range", async () => {
    const a = await gatewayA.newAccount(["MEDIA"]);
    const bytes = mp4OfSize(3 * RANGE_BYTES + 12345, 4200); // several ranges
    const up = await uploadMedia(a, bytes, "clip.mp4");
    expect(up.status).toBe(201);
    expect(up.body).toMatchObject({ size: bytes.length, durationMs: 4200, contentType: "video/mp4" });
    const { id } = up.body;
    // On the media node's disk, nowhere on the gateways'.
    expect(readFileSync(path.join(media.config.mediaDir, id)).equals(bytes)).toBe(true);
    expect(readdirSync(gatewayA.config.mediaDir)).toEqual([]);
    expect(readdirSync(gatewayB.config.mediaDir)).toEqual([]);
    const spool = (gatewayA.app.broker.getLocalService("gateway") as unknown as { spoolDir: string }).spoolDir;
    await eventually(() => expect(readdirSync(spool)).toEqual([])); // the gateway's spool file goes once the media node answered
    const [{ node_id }] = (await tdb.db.sequelize.query(`SELECT node_id FROM media WHERE id = $1`, { bind: [id], type: QueryTypes.SELECT })) as [
      { node_id: string },
    ];
    expect(node_id).toBe(`${namespace}-media`);

    const onB = gatewayB.api.baseUrl;
    const whole = await readContent(a, id, {}, onB);
    expect(whole.status).toBe(200);
    expect(whole.headers.get("content-type")).toBe("video/mp4");
    expect(createHash("sha256").update(whole.bytes).digest("hex")).toBe(up.body.sha256);
    expect(whole.bytes.equals(bytes)).toBe(true);

    // A range across a piece boundary, and the last bytes.
    const start = RANGE_BYTES - 100;
    const end = 2 * RANGE_BYTES + 99;
    const part = await readContent(a, id, { range: `bytes=${start}-${end}` }, onB);
    expect(part.status).toBe(206);
    expect(part.headers.get("content-range")).toBe(`bytes ${start}-${end}/${bytes.length}`);
    expect(part.bytes.equals(bytes.subarray(start, end + 1))).toBe(true);
    const tail = await readContent(a, id, { range: "bytes=-10" }, onB);
    expect(tail.bytes.equals(bytes.subarray(-10))).toBe(true);
    expect((await readContent(a, id, { "if-none-match": `"${up.body.sha256}"` }, onB)).status).toBe(304);
    const past = await readContent(a, id, { range: `bytes=${bytes.length}-` }, onB);
    expect(past.status).toBe(416);
    expect(past.headers.get("content-range")).toBe(`bytes */${bytes.length}`);
  });

  it("answers errors across the wire as problems, and deletes the file on the media node through the other gateway", async () => {
    const a = await gatewayA.newAccount(["MEDIA"]);
    const b = await gatewayA.newAccount(["MEDIA"]);
    const { id } = (await uploadMedia(a, png(), "a.png")).body;
    const pdf = await uploadMedia(a, "%PDF-1.4\n%âãÏÓ\n", "x.png");
    expect(pdf.status).toBe(415);
    expect(pdf.body.detail).toMatch(/PDF/);
    expect((await readContent(b, id, {}, gatewayB.api.baseUrl)).status).toBe(404);
    await gatewayA.app.broker.call("media.reference", { owner: "reply:x1", mediaIds: [id] }, { meta: { companyId: a.companyId } });
    const busy = await fetch(`${gatewayB.api.baseUrl}/media/${id}`, { method: "DELETE", headers: { "x-api-key": a.key.apiKey } });
    expect(busy.status).toBe(409);
    expect(((await busy.json()) as { referencedBy: string[] }).referencedBy).toEqual(["reply:x1"]);
    await gatewayB.app.broker.call("media.release", { owner: "reply:x1" }, { meta: { companyId: a.companyId } });
    const del = await fetch(`${gatewayB.api.baseUrl}/media/${id}`, { method: "DELETE", headers: { "x-api-key": a.key.apiKey } });
    expect(del.status).toBe(204);
    expect(readdirSync(media.config.mediaDir)).not.toContain(id);
  });

  it("serves a file through a media node that does not hold it (pulled from the one that does), and answers 503 with Retry-After while that node is away", async () => {
    const a = await gatewayA.newAccount(["MEDIA"]);
    const bytes = mp4OfSize(RANGE_BYTES + 777, 1500);
    const { id } = (await uploadMedia(a, bytes, "v.mp4")).body; // only the first media node runs: it keeps the file
    media2 = await startTestApp({
      services: ["media"],
      db: tdb.db,
      config: { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url },
      broker: { namespace, nodeID: `${namespace}-media2` },
    });
    await eventually(() => expect(mediaNodes(gatewayB).sort()).toEqual([`${namespace}-media`, `${namespace}-media2`]));
    const answer = (await gatewayA.app.broker.call("media.content", { id }, { nodeID: `${namespace}-media2`, meta: { companyId: a.companyId } })) as RemoteFile;
    expect(answer.$remoteFile).toMatchObject({ nodeID: `${namespace}-media`, action: "media.range", size: bytes.length });
    for (let i = 0; i < 4; i++) {
      const r = await readContent(a, id, { range: "bytes=100-" }, gatewayB.api.baseUrl);
      expect(r.status).toBe(206);
      expect(r.bytes.equals(bytes.subarray(100))).toBe(true);
    }
    await media.stop();
    await eventually(() => expect(mediaNodes(gatewayB)).toEqual([`${namespace}-media2`]));
    // A StatefulSet pod restarting: GET /media/{id} says the media exists, so its content is a 503 to retry, not a 404.
    const away = await readContent(a, id, {}, gatewayB.api.baseUrl);
    expect(away.status).toBe(503);
    expect(away.headers.get("retry-after")).toBe("30");
    expect(JSON.parse(away.bytes.toString("utf8"))).toMatchObject({
      status: 503,
      type: expect.stringMatching(/service-unavailable/),
      detail: expect.stringMatching(/away/),
    });
    expect((await readContent(a, id, {}, gatewayA.api.baseUrl)).status).toBe(503);
    expect((await a.api.get(`/media/${id}`)).status).toBe(200);
  });
});
