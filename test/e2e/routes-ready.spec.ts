/**
 * Readiness means routes: a service of the node that is slow to start (a worker pool, a sweep)
 * joins the registry after the gateway's first debounced route build, and the node must not say
 * ready until its routes include it.
 */
import { startTestApp, type TestApp } from "../helpers/app";

const slow = {
  name: "slowstart",
  settings: { rest: "/" },
  actions: {
    hello: {
      rest: "GET /slow-start",
      operation: "AUTHENTICATION",
      responses: { 200: { type: "object" } },
      handler() {
        return { ok: true };
      },
    },
  },
  // Longer than moleculer-web's 500 ms debounce of route builds.
  started: () => new Promise((resolve) => setTimeout(resolve, 1500)),
};

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth"], extraServices: [slow as never] });
});
afterAll(() => t?.stop());

it("is ready only once the routes hold every service of the node, including one slow to start", async () => {
  const a = await t.newAccount(["AUTHENTICATION"]);
  const res = await a.api.get("/slow-start");
  expect({ status: res.status, body: res.body }).toEqual({ status: 200, body: { ok: true } });
});
