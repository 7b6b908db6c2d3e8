import autocannon from "autocannon";
let i = 0;
const co = process.env.PROBE_CO ?? "probe-" + Date.now();
const kind = process.env.PROBE_KIND ?? "messages";
const n = 20000;
const t0 = performance.now();
autocannon({ url: `http://127.0.0.1:3971/internal/v1/${kind === "messages" ? "messages" : "receipts/sms"}`, connections: 50, amount: n, method: "POST", headers: { "content-type": "application/json" },
  requests: [{ setupRequest: (req) => ({ ...req, body: JSON.stringify(kind === "messages" ? { companyId: co, channel: "SMS", customerMessageId: `m-${i++}`, destination: "+493012345678" } : { companyId: co, MESSAGE_ID: `m-${i++}`, DESTINATION: "+493012345678", DELIVERY_STATUS: 3, DELIVERY_DATE: "2026-11-20T10:00:05Z", PRICE: 0.04 }) }) }] }).then((r) => console.log(`${kind}: ${Math.round(n / ((performance.now() - t0) / 1000))} req/s, p99 ${r.latency.p99} ms, 2xx ${r["2xx"]}, non2xx ${r.non2xx}`));
