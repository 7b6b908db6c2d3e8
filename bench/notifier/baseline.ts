/**
 * The floor of bench/notifier: a bare undici Pool posting N event bodies of the bench's shape to the
 * receiver, `connections` at a time, in a process of its own (as the notifier is). Prints one JSON
 * line: { events, seconds }.
 *   tsx bench/notifier/baseline.ts <url> <n> <connections>   (NODE_EXTRA_CA_CERTS: the receiver's CA)
 */
import { Pool } from "undici";
import { eventBody } from "./events";

async function main() {
  const [url, nArg, cArg] = process.argv.slice(2);
  const n = Number(nArg);
  const connections = Number(cArg);
  const u = new URL(url!);
  const pool = new Pool(u.origin, { connections, pipelining: 1 });
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: connections }, async () => {
      for (;;) {
        const i = next++;
        if (i >= n) return;
        const res = await pool.request({
          path: u.pathname,
          method: "POST",
          headers: { "content-type": "application/json", "user-agent": "baseline" },
          body: eventBody(i),
        });
        await res.body.dump();
        if (res.statusCode !== 200) throw new Error(`baseline: HTTP ${res.statusCode}`);
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  await pool.close();
  process.stdout.write(`${JSON.stringify({ events: n, seconds })}\n`);
}

void main();
