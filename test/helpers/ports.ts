/**
 * A TCP port free right now on every interface, for a process a test starts (closed again before it
 * is used). Drawn below the kernel's ephemeral range (32768-60999 here): a port the kernel picked
 * for a listener of our own, once closed, can be taken as the source port of any outgoing
 * connection (to PostgreSQL, NATS, a test's HTTP client) before the process under test binds it,
 * and the start then fails with EADDRINUSE; nothing takes a port below that range unasked.
 */
import net from "node:net";

const LOW = 20000;
const HIGH = 32767;

const bindable = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const s = net.createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "0.0.0.0", () => s.close(() => resolve(true)));
  });

export async function freePort(): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = LOW + Math.floor(Math.random() * (HIGH - LOW + 1));
    if (await bindable(port)) return port;
  }
  throw new Error(`no free port between ${LOW} and ${HIGH} after 200 tries`);
}
