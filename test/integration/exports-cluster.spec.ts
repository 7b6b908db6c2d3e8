/**
 * Exports split over real NATS, as operators run them: a gateway node (with auth and tracking) and
 * exports nodes, each with an EXPORT_DIR of its own. A file written by one exports node downloads
 * through the gateway whichever exports node the call reaches: another one streams it from the
 * writer through Moleculer, range by range as the client reads. Once the writer is gone, the download is a 404 problem, never a 500.
 */
import type { Readable } from "node:stream";
import { gunzipSync } from "node:zlib";
import { RANGE_BYTES, remoteFileStream, type RemoteFile } from "../../lib/http/remote-file";
import { exportedFileUrl } from "../helpers/exports";
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";

async function bytesOf(s: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of s) chunks.push(Buffer.from(c as Buffer));
  return Buffer.concat(chunks);
}

describeOverNats("exports over NATS", () => {
  let tdb: TestDatabase;
  let core: TestApp;
  let writer: TestApp;
  let reader: TestApp | null = null;
  const namespace = uid("exports");

  const exportsNodes = () =>
    (core.app.broker.registry.getServiceList({ onlyAvailable: true }) as Array<{ name: string; nodeID: string }>)
      .filter((s) => s.name === "exports")
      .map((s) => s.nodeID)
      .sort();

  const waitForNodes = (n: number) => eventually(() => expect(exportsNodes()).toHaveLength(n));

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const cluster = { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url };
    core = await startTestApp({ services: ["gateway", "auth", "tracking"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-core` } });
    writer = await startTestApp({
      services: ["exports"],
      db: tdb.db,
      config: { ...cluster, exportWorkers: 1 },
      broker: { namespace, nodeID: `${namespace}-x1` },
    });
    await waitForNodes(1);
    await eventually(async () => expect((await core.api.get("/exports")).status).toBe(401));
  }, 60_000);

  afterAll(async () => {
    await reader?.stop();
    await writer?.stop();
    await core?.stop();
    await tdb?.drop();
  });

  it("serves a file written on another node, through any exports node, byte for byte", async () => {
    const a = await core.newAccount(["EXPORTS"]);
    await core.db.sequelize.query(
      `INSERT INTO messages (company_id, channel, customer_message_id, destination, sent_at, status_code, text)
       SELECT $1, 'SMS', 'c-' || i, '+35191' || lpad(i::text, 7, '0'), now() - (i || ' seconds')::interval, 1, md5(i::text) || repeat(md5((i * 7)::text), i % 10) FROM generate_series(1, 20000) i`,
      { bind: [a.companyId] },
    );
    const { exportId, url } = await exportedFileUrl(a.api, core.app.port!, "/messages/history/export");
    const first = await fetch(url, { headers: { "accept-encoding": "identity" } });
    expect(first.status).toBe(200);
    const plain = Buffer.from(await first.arrayBuffer());
    expect(plain.toString("utf8").split("\n").length).toBeGreaterThan(20000);

    // A second exports node, without the file: it streams it from the writer.
    reader = await startTestApp({
      services: ["exports"],
      db: tdb.db,
      config: { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url },
      broker: { namespace, nodeID: `${namespace}-x2` },
    });
    await waitForNodes(2);
    const [, expires, signature] = /\/download\/([^/]+)\/([^/]+)$/.exec(url)!;
    const answer = (await core.app.broker.call("exports.download", { exportId, expires, signature }, { nodeID: `${namespace}-x2` })) as RemoteFile;
    // x2 has no such file: it points at the writer, and the file is pulled from there range by range.
    expect(answer.$remoteFile).toMatchObject({ nodeID: `${namespace}-x1`, action: "exports.range" });
    expect(answer.$remoteFile.size).toBeGreaterThan(RANGE_BYTES); // several ranges
    const gz = await bytesOf(remoteFileStream(core.app.broker, answer.$remoteFile));
    expect(gunzipSync(gz).equals(plain)).toBe(true);
    // And through the gateway, whichever node the balancer picks, several times.
    for (let i = 0; i < 4; i++) {
      const r = await fetch(url, { headers: { "accept-encoding": "identity" } });
      expect(r.status).toBe(200);
      expect(Buffer.from(await r.arrayBuffer()).equals(plain)).toBe(true);
    }

    // The writer goes away: the file is unreachable, a 404 problem (never a 500).
    await writer.stop();
    await waitForNodes(1);
    const gone = await fetch(url);
    expect(gone.status).toBe(404);
    expect(gone.headers.get("content-type")).toMatch(/problem\+json/);
  }, 60_000);
});
