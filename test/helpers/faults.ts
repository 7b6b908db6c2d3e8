/**
 * Faults a test can inject without touching the machine's shared servers: other test files (and a
 * CI run) use the PostgreSQL and NATS on their usual ports at the same time, so a suite never stops
 * those. It starts a NATS server of its own (killed and started again on the same port: "NATS
 * restarted"), and puts a TCP proxy between its processes and the PostgreSQL ("PostgreSQL stopped":
 * the proxy destroys every connection and refuses new ones; "restarted": it accepts again).
 * And the product's nodes as OS processes (`npm start` with SERVICES), as production runs them.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { freePort } from "./ports";
import { productScript } from "./product-build";

export const NATS_SERVER = "/usr/sbin/nats-server";
export const canRunNatsServer = () => existsSync(NATS_SERVER);
const ROOT = path.join(__dirname, "../..");

export { freePort };

export async function waitForPort(port: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const open = await new Promise<boolean>((resolve) => {
      const c = net.connect(port, "127.0.0.1", () => {
        c.end();
        resolve(true);
      });
      c.once("error", () => resolve(false));
    });
    if (open) return;
    if (Date.now() > deadline) throw new Error(`nothing listens on ${port} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export const exited = (c: ChildProcess) =>
  new Promise<number | null>((resolve) => (c.exitCode !== null || c.signalCode !== null ? resolve(c.exitCode) : c.once("exit", (code) => resolve(code))));

/** A nats-server of the test's own on a fixed loopback port, with JetStream in a directory of its own. */
export class PrivateNats {
  private proc: ChildProcess | null = null;
  private readonly dir = mkdtempSync(path.join(os.tmpdir(), "pgw-nats-"));
  private constructor(readonly port: number) {}

  static async start(): Promise<PrivateNats> {
    const n = new PrivateNats(await freePort());
    await n.start();
    return n;
  }

  get url() {
    return `nats://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    this.proc = spawn(NATS_SERVER, ["-a", "127.0.0.1", "-p", String(this.port), "-js", "-sd", this.dir], { stdio: "ignore" });
    await waitForPort(this.port);
  }

  /** The server dies at once (SIGKILL): every client loses its link. */
  async kill(): Promise<void> {
    const p = this.proc;
    this.proc = null;
    if (!p || p.exitCode !== null) return;
    p.kill("SIGKILL");
    await exited(p);
  }
}

/** A TCP proxy to the PostgreSQL of `url`; `cut()` drops every connection and refuses new ones until `restore()`. */
export class PgProxy {
  private cutOff = false;
  private readonly sockets = new Set<net.Socket>();
  private constructor(
    private readonly server: net.Server,
    private readonly target: URL,
  ) {}

  static async start(url: string): Promise<PgProxy> {
    const target = new URL(url);
    const server = net.createServer();
    const proxy = new PgProxy(server, target);
    server.on("connection", (client) => proxy.accept(client));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  /** `url` with the proxy in place of the server. */
  urlFor(url: string): string {
    const u = new URL(url);
    u.hostname = "127.0.0.1";
    u.port = String((this.server.address() as net.AddressInfo).port);
    return u.toString();
  }

  private accept(client: net.Socket): void {
    if (this.cutOff) {
      client.destroy();
      return;
    }
    const upstream = net.connect(Number(this.target.port || 5432), this.target.hostname);
    for (const [a, b] of [
      [client, upstream],
      [upstream, client],
    ] as const) {
      this.sockets.add(a);
      a.on("error", () => b.destroy());
      a.on("close", () => {
        this.sockets.delete(a);
        b.destroy();
      });
      a.pipe(b);
    }
  }

  /** "PostgreSQL stopped": every connection is destroyed, new ones are refused. */
  cut(): void {
    this.cutOff = true;
    for (const s of this.sockets) s.destroy();
  }

  /** "PostgreSQL restarted": connections are accepted again. */
  restore(): void {
    this.cutOff = false;
  }

  close(): Promise<void> {
    this.cut();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/**
 * A product node as an OS process, as the image runs it (scripts/start.ts compiled: product-build.ts) with these variables.
 * With `logs`, its JSON log records are collected there.
 */
export function startNode(env: Record<string, string>, children: ChildProcess[], logs?: Array<Record<string, unknown>>): ChildProcess {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(
      ([k]) => !/^(DATABASE_URL|DATA_DIR|TRANSPORTER|SERVICES|PORT|HOST|NODE_ID|TEST_|LOG_|NOTIFIER_|CAMPAIGN_|UPSTREAM_|SIMULATOR_)/.test(k),
    ),
  );
  const child = spawn(process.execPath, productScript("start"), {
    cwd: ROOT,
    env: { ...clean, HOST: "127.0.0.1", PORT: "0", INTERNAL_PORT: "0", LOG_LEVEL: "warn", ...env },
    // TEST_NODE_OUTPUT=1 shows the nodes' logs (LOG_LEVEL warn) while debugging a run.
    stdio: process.env.TEST_NODE_OUTPUT ? ["ignore", "inherit", "inherit"] : ["ignore", logs ? "pipe" : "ignore", "ignore"],
  });
  if (logs && child.stdout) {
    readline.createInterface({ input: child.stdout }).on("line", (line) => {
      try {
        logs.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        logs.push({ line });
      }
    });
  }
  children.push(child);
  return child;
}
