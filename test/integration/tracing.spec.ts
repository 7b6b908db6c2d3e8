/**
 * Tracing (Moleculer's tracer): off by default; with TRACING_EXPORTER set, every call of a request is
 * a span whose trace id is the request's X-Request-Id, so a trace is found from a log line or a
 * problem answer. The "event" exporter hands spans to a local listener here, as a forwarder would.
 */
import { startTestApp, type TestApp } from "../helpers/app";
import { eventually } from "../helpers/eventually";

interface Span {
  name: string;
  traceID: string;
  parentID: string | null;
  tags?: { action?: { name?: string } };
}

function collector(into: Span[]) {
  return {
    name: "span-collector",
    events: {
      "$tracing.spans"(ctx: { params: Span[] }) {
        into.push(...ctx.params);
      },
    },
  };
}

describe("tracing", () => {
  let on: TestApp;
  let off: TestApp;
  const spansOn: Span[] = [];
  const spansOff: Span[] = [];

  beforeAll(async () => {
    on = await startTestApp({ services: ["gateway", "auth"], config: { tracingExporter: "event" }, extraServices: [collector(spansOn) as never] });
    off = await startTestApp({ services: ["gateway", "auth"], extraServices: [collector(spansOff) as never] });
  });
  afterAll(async () => {
    await on?.stop();
    await off?.stop();
  });

  it("traces a request's calls under its request id when an exporter is set", async () => {
    const a = await on.newAccount(["AUTHENTICATION"]);
    const res = await a.api.get("/authentication/me", { headers: { "x-request-id": "trace-me-0001" } });
    expect(res.status).toBe(200);
    const spans = await eventually(() => {
      const mine = spansOn.filter((s) => s.traceID === "trace-me-0001");
      expect(mine.map((s) => s.tags?.action?.name)).toContain("auth.me");
      return mine;
    });
    // One trace: every span of the request carries its id, and all but the first have a parent in it.
    const ids = new Set(spans.map((s) => (s as unknown as { id: string }).id));
    expect(spans.filter((s) => s.parentID !== null && !ids.has(s.parentID))).toHaveLength(0);
  });

  it("sends no span by default", async () => {
    const a = await off.newAccount(["AUTHENTICATION"]);
    expect((await a.api.get("/authentication/me", { headers: { "x-request-id": "trace-off-0001" } })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1500)); // past the exporter's 1 s interval, were it on
    expect(spansOff).toEqual([]);
    expect(off.app.broker.isTracingEnabled()).toBe(false);
  });
});
