import { startTestApp, type TestApp } from "../helpers/app";
import { expectProblem } from "../helpers/expect";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Two equally slow actions (1.5 s): one keeps the default timeout (200 ms here), one declares a
 * longer one (10 s). Both margins are wide, so that a busy machine cannot turn either answer.
 */
const sleepy = {
  name: "sleepy",
  settings: { rest: "/" },
  actions: {
    usual: {
      rest: "GET /probe/usual",
      operation: "AUTHENTICATION",
      responses: { 200: { type: "object" } },
      handler: () => sleep(1500).then(() => ({ done: true })),
    },
    patient: {
      rest: "GET /probe/patient",
      operation: "AUTHENTICATION",
      timeout: 10_000,
      responses: { 200: { type: "object" } },
      handler: () => sleep(1500).then(() => ({ done: true })),
    },
  },
};

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ config: { requestTimeoutMs: 200 }, extraServices: [sleepy as never] });
});
afterAll(() => t?.stop());

it("gives up on an action after REQUEST_TIMEOUT_MS with a 503 problem", async () => {
  const a = await t.newAccount(["AUTHENTICATION"]);
  const res = await a.api.get("/probe/usual");
  expectProblem(res, 503);
  expect(res.text).not.toMatch(/sleepy|usual/);
});

it("waits as long as an action declares", async () => {
  const a = await t.newAccount(["AUTHENTICATION"]);
  const res = await a.api.get("/probe/patient");
  expect(res.status).toBe(200);
  expect(res.body).toEqual({ done: true });
});
