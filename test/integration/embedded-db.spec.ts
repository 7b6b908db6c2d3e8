/**
 * The embedded database's socket server (what `npm start` runs): every connection shares one
 * PGlite session, so each must have it to itself from its first message until the backend is idle
 * again. Many connections' parameterised queries at once must each get their own answer, a client
 * that fails or leaves mid-batch must not hold up the others, and nobody gets in without the
 * password generated for the data directory.
 */
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { openDatabase, type Database } from "../../lib/db/db";
import { EMBEDDED_SHARED_BUFFERS, openEmbedded } from "../../lib/db/embedded-db";

const CLIENTS = 8;
const PER_CLIENT = 60;

/** Rejects when `p` has not settled within `ms` (a stalled queue fails the test instead of hanging it). */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
    }),
  ]);
}

/** One query of three shapes (2, 5 and 1 parameters; one row, one wide row, many rows), each answer naming its asker. */
async function ask(client: pg.Client, c: number, i: number): Promise<void> {
  const tag = `c${c}-q${i}`;
  switch (i % 3) {
    case 0: {
      const r = await client.query("SELECT $1::int AS n, $2::text AS tag", [i, tag]);
      expect(r.rows).toEqual([{ n: i, tag }]);
      break;
    }
    case 1: {
      const r = await client.query("SELECT $1::int AS a, $2::int AS b, $3::text AS tag, $4::int AS c, $5::bool AS d", [c, i, tag, c * 1000 + i, i % 2 === 0]);
      expect(r.rows).toEqual([{ a: c, b: i, tag, c: c * 1000 + i, d: i % 2 === 0 }]);
      break;
    }
    default: {
      const count = 1 + ((c + i) % 7);
      const r = await client.query(`SELECT g AS n, '${tag}' AS tag FROM generate_series(1, $1::int) g ORDER BY g`, [count]);
      expect(r.rows).toEqual(Array.from({ length: count }, (_, k) => ({ n: k + 1, tag })));
    }
  }
}

/** Startup message of protocol 3.0 (user postgres, database postgres). */
function startupMessage(): Buffer {
  const body = Buffer.from("user\0postgres\0database\0postgres\0\0");
  const head = Buffer.alloc(8);
  head.writeInt32BE(8 + body.length, 0);
  head.writeInt32BE(196608, 4);
  return Buffer.concat([head, body]);
}

function typed(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0);
  head.writeInt32BE(4 + body.length, 1);
  return Buffer.concat([head, body]);
}

describe("embedded database socket", () => {
  let dir: string;
  let db: Database;
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "pgw-embedded-"));
    db = await openDatabase({ databaseUrl: null, dataDir: dir, migrate: false });
  });
  afterAll(async () => {
    await db?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const connect = async () => {
    const client = new pg.Client({ connectionString: db.url });
    client.on("error", () => undefined);
    await client.connect();
    return client;
  };

  it("runs PostgreSQL with a buffer pool of 96 MB, not PGlite's 128 MB (an idle npm start's memory and deep pages' speed: docs/operating.md)", async () => {
    const client = await connect();
    try {
      const { rows } = await client.query<{ shared_buffers: string }>("SHOW shared_buffers");
      expect(rows).toEqual([{ shared_buffers: EMBEDDED_SHARED_BUFFERS }]);
      expect(EMBEDDED_SHARED_BUFFERS).toBe("96MB");
      // PGlite's own start parameters are kept (a single-user backend, no parallel workers).
      const workers = await client.query<{ max_worker_processes: string }>("SHOW max_worker_processes");
      expect(workers.rows).toEqual([{ max_worker_processes: "0" }]);
    } finally {
      await client.end();
    }
  });

  it("answers every connection's parameterised queries with its own rows when many run at once", async () => {
    const clients = await Promise.all(Array.from({ length: CLIENTS }, connect));
    try {
      const runs = clients.map(async (client, c) => {
        for (let i = 0; i < PER_CLIENT; i++) {
          if (c < 2) {
            // Two connections hold the session in transactions (with a pause inside, as a service
            // awaiting other work does) while the others' batches pile up behind them.
            await client.query("BEGIN");
            await ask(client, c, i);
            await new Promise((r) => setTimeout(r, 2));
            await client.query("COMMIT");
          } else {
            await ask(client, c, i);
          }
        }
      });
      await within(Promise.all(runs), 30000, `${CLIENTS * PER_CLIENT} queries`);
    } finally {
      await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
    }
  });

  it("keeps a transaction's statements together while other connections query", async () => {
    const clients = await Promise.all(Array.from({ length: 4 }, connect));
    try {
      await clients[0]!.query("CREATE TABLE IF NOT EXISTS turn_test (owner int, n int)");
      const runs = clients.map(async (client, c) => {
        for (let i = 0; i < 15; i++) {
          await client.query("BEGIN");
          await client.query("INSERT INTO turn_test VALUES ($1, $2)", [c, i]);
          const mine = await client.query("SELECT count(*)::int AS n FROM turn_test WHERE owner = $1", [c]);
          expect(mine.rows[0].n).toBe(i + 1);
          await client.query(i % 2 ? "COMMIT" : "ROLLBACK");
          if (i % 2 === 0) await client.query("INSERT INTO turn_test VALUES ($1, $2)", [c, i]);
        }
      });
      await within(Promise.all(runs), 30000, "transactions");
      const total = await clients[0]!.query("SELECT owner, count(*)::int AS n FROM turn_test GROUP BY owner ORDER BY owner");
      expect(total.rows).toEqual([0, 1, 2, 3].map((owner) => ({ owner, n: 15 })));
    } finally {
      await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
    }
  });

  it("goes on serving the others when a client's batch fails or the client leaves in the middle of one", async () => {
    const clients = await Promise.all(Array.from({ length: 4 }, connect));
    const { port, password } = new URL(db.url) as unknown as { port: string; password: string };
    try {
      // A client that sends Parse and Bind, never Sync, and goes away.
      const raw = net.connect(Number(port), "127.0.0.1");
      await new Promise<void>((resolve, reject) => raw.once("connect", resolve).once("error", reject));
      raw.on("error", () => undefined);
      raw.write(startupMessage());
      raw.write(typed("p", Buffer.from(`${decodeURIComponent(password)}\0`)));
      await new Promise((r) => setTimeout(r, 200));
      raw.write(typed("P", Buffer.from("\0SELECT $1::int\0\0\0")));
      raw.write(typed("B", Buffer.from([0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0x37, 0, 0])));
      const runs = clients.map(async (client, c) => {
        for (let i = 0; i < 30; i++) {
          if (i % 5 === c) {
            await expect(client.query("SELECT 1 / $1::int AS x, $2::text AS tag", [0, "boom"])).rejects.toThrow(/division by zero/);
          } else {
            await ask(client, c, i);
          }
        }
      });
      setTimeout(() => raw.destroy(), 300);
      await within(Promise.all(runs), 30000, "queries beside failing clients");
    } finally {
      await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
    }
  });

  it("refuses a connection without the data directory's password, and keeps that password across openings", async () => {
    const url = new URL(db.url);
    expect(url.password).not.toBe("");
    for (const password of ["", "wrong"]) {
      const client = new pg.Client({ host: url.hostname, port: Number(url.port), user: "postgres", database: "postgres", password });
      client.on("error", () => undefined);
      await expect(client.connect()).rejects.toThrow(/password/);
      await client.end().catch(() => undefined);
    }
    // An admin beside the running service is handed the same URL, password included.
    const admin = await openEmbedded(dir, "admin", 1000);
    expect(admin.owner).toBe(false);
    expect(admin.url).toBe(db.url);
    await admin.close();
  });
});
