/**
 * Exports split over real NATS, as operators run them: a gateway node (with auth and tracking) and
 * exports nodes, each with an EXPORT_DIR of its own. A file written by one exports node downloads
 * through the gateway whichever exports node the call reaches: another one streams it from the
 * writer through Moleculer, range by range as the client reads. Once the writer is gone, the download is a 404 problem, never a 500.
 * The statement of each export is its data's owner's, asked over the bus (issue 33 item 1): a
 * message export's of tracking on the core node, a contacts export's of a contacts node. Without a
 * contacts node a contacts export is a 503 at its creation, and a queued one is retried until a
 * contacts node answers.
 */
import type { Readable } from "node:stream";
import { gunzipSync } from "node:zlib";
import { RANGE_BYTES, remoteFileStream, type RemoteFile } from "../../lib/http/remote-file";
import { EXPORT_QUEUED } from "../../services/exports/exports.runner";
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

  it("asks contacts for a contacts export's statement: 503 without a contacts node, retried while none answers, written once one does", async () => {
    const a = await core.newAccount(["EXPORTS", "CONTACTS"]);
    await core.db.sequelize.query(
      `INSERT INTO contacts (id, company_id, first_name, phone_number) SELECT gen_random_uuid(), $1, 'P' || i, '+35192' || lpad(i::text, 7, '0') FROM generate_series(1, 30) i`,
      { bind: [a.companyId] },
    );
    const refused = await a.api.post("/exports/contacts", {});
    expect(refused.status).toBe(503);
    expect(refused.headers.get("content-type")).toMatch(/problem\+json/);

    // A job queued while no contacts node runs (made before it left): its run cannot get a statement; it is retried, not failed.
    const [{ id }] = (await core.db.sequelize.query(
      `INSERT INTO export_jobs (id, company_id, type, filters, status) VALUES (gen_random_uuid(), $1, 'CONTACTS', '{}', 'QUEUED') RETURNING id`,
      {
        bind: [a.companyId],
        type: "SELECT",
      },
    )) as Array<{ id: string }>;
    await core.app.broker.broadcast(EXPORT_QUEUED);
    // Not counted as an attempt: waiting for an owner never fails the export.
    await eventually(
      async () => {
        const [job] = (await core.db.sequelize.query(`SELECT status, error, attempts FROM export_jobs WHERE id = $1`, {
          bind: [id],
          type: "SELECT",
        })) as Array<{
          status: string;
          error: string | null;
          attempts: number;
        }>;
        expect(job).toMatchObject({ status: "QUEUED", error: expect.stringContaining("contacts did not answer"), attempts: 0 });
      },
      { timeoutMs: 20_000 },
    );

    const contactsNode = await startTestApp({
      services: ["contacts"],
      db: tdb.db,
      config: { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url },
      broker: { namespace, nodeID: `${namespace}-contacts` },
    });
    try {
      await eventually(async () => expect((await a.api.post("/exports/contacts", { sortBy: "firstName" })).status).toBe(202), { timeoutMs: 20_000 });
      // Contacts' refusal crosses the bus as the documented 400 problem.
      const unknownField = await a.api.post("/exports/contacts", { "customFields.nope": "x" });
      expect(unknownField.status).toBe(400);
      expect(unknownField.headers.get("content-type")).toMatch(/problem\+json/);
      const { url } = await exportedFileUrl(a.api, core.app.port!, "/exports/contacts", { sortBy: "firstName" });
      const csv = (await (await fetch(url)).text()).trim().split("\n");
      expect(csv[0]!.startsWith("id,firstName,lastName")).toBe(true);
      expect(csv).toHaveLength(31);
      // The job queued without a contacts node completes on a later attempt.
      await eventually(
        async () => {
          const [job] = (await core.db.sequelize.query(`SELECT status, row_count::int AS row_count FROM export_jobs WHERE id = $1`, {
            bind: [id],
            type: "SELECT",
          })) as Array<{
            status: string;
            row_count: number;
          }>;
          expect(job).toMatchObject({ status: "COMPLETED", row_count: 30 });
        },
        { timeoutMs: 30_000 },
      );
    } finally {
      await contactsNode.stop();
    }
  }, 90_000);

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
