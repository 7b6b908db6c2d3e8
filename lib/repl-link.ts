/**
 * How `npm run repl` finds a single-process service (no TRANSPORTER) through its DATA_DIR: the
 * service's hub (lib/loopback-transporter.ts) publishes its pid, node id and loopback port in
 * DATA_DIR/repl.json while it listens, and both sides share DATA_DIR/repl.secret (generated once,
 * mode 0600, like the other keys of the directory), so only who can read the directory can join.
 */
import { randomBytes } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import type { BrokerOptions } from "moleculer";
import { keyFileOnce, readKeyFile } from "./key-file";
import { LoopbackHub, LoopbackRefused, openLoopback, type LoopbackLink } from "./loopback-transporter";
import { lockFileOf } from "./embedded-db";

export const REPL_SECRET_FILE = "repl.secret";
export const replInfoOf = (dataDir: string) => path.join(dataDir, "repl.json");

export interface ReplInfo {
  pid: number;
  nodeID: string;
  port: number;
  startedAt: string;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

function readJson<T>(file: string): T | null {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8")) as T;
  } catch {
    return null;
  }
}

/** The transporter of a single-process service: a hub on 127.0.0.1 that REPLs with DATA_DIR's secret may join. */
export function replHub(dataDir: string): { transporter: BrokerOptions["transporter"]; hub: LoopbackHub } {
  const secret = keyFileOnce(dataDir, REPL_SECRET_FILE, () => randomBytes(32).toString("base64url"));
  const file = replInfoOf(dataDir);
  const hub = new LoopbackHub({
    secret,
    onListening(port, nodeID) {
      const info: ReplInfo = { pid: process.pid, nodeID, port, startedAt: new Date().toISOString() };
      const tmp = `${file}.${process.pid}.tmp`;
      fs.writeFileSync(tmp, JSON.stringify(info), { mode: 0o600 });
      fs.renameSync(tmp, file);
    },
    onClosed() {
      if (readJson<ReplInfo>(file)?.pid === process.pid) fs.rmSync(file, { force: true });
    },
  });
  return { transporter: hub as unknown as BrokerOptions["transporter"], hub };
}

/** Why the REPL cannot join: one line saying what to do. */
export class ReplRefusal extends Error {
  override name = "ReplRefusal";
}

/**
 * Finds the service running on `dataDir` and opens an authenticated link to it, or throws a
 * ReplRefusal that says what to do.
 */
export async function joinRunningService(dataDir: string): Promise<{ link: LoopbackLink; info: ReplInfo }> {
  const info = readJson<ReplInfo>(replInfoOf(dataDir));
  if (!info || !pidAlive(info.pid)) {
    const db = readJson<{ pid: number; role: string }>(lockFileOf(dataDir));
    if (db?.role === "service" && pidAlive(db.pid)) {
      throw new ReplRefusal(
        `The service on DATA_DIR ${dataDir} (pid ${db.pid}) is still starting, or was started by a version without the REPL socket: wait for it to start (or restart it with \`npm start\`), then run \`npm run repl\` again.`,
      );
    }
    throw new ReplRefusal(
      `Nothing is running on DATA_DIR ${dataDir}: start the service first (\`npm start\` in another terminal, with the same DATA_DIR), then run \`npm run repl\` again.`,
    );
  }
  const secretFile = path.join(dataDir, REPL_SECRET_FILE);
  let secret: string | null;
  try {
    secret = readKeyFile(secretFile, (m) => process.stderr.write(`${m}\n`));
  } catch (e) {
    throw new ReplRefusal(`Cannot read ${secretFile}: ${(e as Error).message}.`);
  }
  if (!secret)
    throw new ReplRefusal(
      `${secretFile} is missing, though the service (pid ${info.pid}) runs on DATA_DIR ${dataDir}: restart the service (\`npm start\`) to write it again.`,
    );
  try {
    return { link: await openLoopback(info.port, secret), info };
  } catch (e) {
    if (!(e instanceof LoopbackRefused)) throw e;
    if (e.reason === "denied") {
      throw new ReplRefusal(
        `The service on DATA_DIR ${dataDir} (pid ${info.pid}) refused the REPL: ${secretFile} is not the secret it started with (was the file replaced?); restart the service (\`npm start\`) so that both read the same file.`,
      );
    }
    if (e.reason === "unreachable") {
      throw new ReplRefusal(
        `The service on DATA_DIR ${dataDir} (pid ${info.pid}) does not answer on 127.0.0.1:${info.port}: if it is stopping, start it again (\`npm start\`), then run \`npm run repl\` again.`,
      );
    }
    throw new ReplRefusal(`Could not join the service on DATA_DIR ${dataDir} (pid ${info.pid}): ${e.message}.`);
  }
}
