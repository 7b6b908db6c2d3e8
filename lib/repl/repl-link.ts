/**
 * How `npm run repl` finds a single-process service (no TRANSPORTER) through its DATA_DIR: the
 * service listens on DATA_DIR/run/repl.sock (lib/repl/repl-transporter.ts), a socket of mode 0600 in
 * a directory of mode 0700, and names its pid and node id in DATA_DIR/repl.json (0600) while it
 * listens. Who may join is decided by the kernel on connect, whatever DATA_DIR's own mode: the user
 * that runs the service, and root.
 */
import fs from "node:fs";
import path from "node:path";
import type net from "node:net";
import { SocketHub, openSocket } from "./repl-transporter";
import { lockFileOf, pidAlive } from "../db/embedded-db";

export const replInfoOf = (dataDir: string) => path.join(dataDir, "repl.json");
export const replSocketOf = (dataDir: string) => path.join(dataDir, "run", "repl.sock");

export interface ReplInfo {
  pid: number;
  nodeID: string;
  socket: string;
  startedAt: string;
}

/** Why the REPL cannot join: one line saying what to do. */
export class ReplRefusal extends Error {
  override name = "ReplRefusal";
}

/** macOS holds 104 bytes in a socket address, Linux 108, with the final NUL. */
const MAX_SOCKET_PATH = 103;

/**
 * The path to listen on or connect to. Node silently cuts a longer one (the socket would land
 * elsewhere), so a long one is given relative to the working directory when that fits, or refused.
 */
function socketAddress(file: string): string {
  if (Buffer.byteLength(file) <= MAX_SOCKET_PATH) return file;
  const relative = path.relative(process.cwd(), file);
  if (Buffer.byteLength(relative) <= MAX_SOCKET_PATH) return relative;
  throw new Error(`${file} is longer than a socket path may be (${MAX_SOCKET_PATH} bytes); use a shorter DATA_DIR`);
}

/** The parsed file, null when missing or unreadable as JSON; a file this user may not read is a refusal. */
function readJson<T>(file: string): T | null {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8")) as T;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EACCES") throw new ReplRefusal(`${file}: permission denied. Run the REPL as the user that runs the service.`);
    return null;
  }
}

/** The transporter of a single-process service: a hub on DATA_DIR/run/repl.sock. */
export function replHub(dataDir: string): SocketHub {
  const file = replSocketOf(dataDir);
  const info = replInfoOf(dataDir);
  return new SocketHub(
    () => {
      const dir = path.dirname(file);
      fs.mkdirSync(dataDir, { recursive: true });
      fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
      // A directory made by someone else, or a symbolic link, is not one to trust.
      const st = fs.lstatSync(dir);
      if (!st.isDirectory() || st.uid !== process.getuid?.()) throw new Error(`${dir} is not a directory of this user`);
      fs.chmodSync(dir, 0o700);
      return socketAddress(file);
    },
    {
      onListening(nodeID) {
        const body: ReplInfo = { pid: process.pid, nodeID, socket: file, startedAt: new Date().toISOString() };
        const tmp = `${info}.${process.pid}.tmp`;
        fs.writeFileSync(tmp, JSON.stringify(body), { mode: 0o600 });
        fs.renameSync(tmp, info);
      },
      onClosed() {
        if (readJson<ReplInfo>(info)?.pid === process.pid) fs.rmSync(info, { force: true });
      },
    },
  );
}

/** Finds the service running on `dataDir` and connects to it, or throws a ReplRefusal that says what to do. */
export async function joinRunningService(dataDir: string): Promise<{ socket: net.Socket; info: ReplInfo }> {
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
  const file = replSocketOf(dataDir);
  try {
    return { socket: await openSocket(socketAddress(file)), info };
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "EACCES" || code === "EPERM") {
      throw new ReplRefusal(`${file}: permission denied. Run the REPL as the user that runs the service (pid ${info.pid}).`);
    }
    if (code === "ENOENT" || code === "ECONNREFUSED") {
      throw new ReplRefusal(
        `The service on DATA_DIR ${dataDir} (pid ${info.pid}) does not answer on ${file}: if it is stopping, start it again (\`npm start\`), then run \`npm run repl\` again.`,
      );
    }
    throw new ReplRefusal(`Could not join the service on DATA_DIR ${dataDir} (pid ${info.pid}): ${(e as Error).message}.`);
  }
}
