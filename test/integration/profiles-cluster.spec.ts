/**
 * Social profiles split over real NATS, on nodes apart from the gateway as operators run them
 * (k8s/base/auth-profiles.yaml): the gateway and auth on one node, profiles on two others sharing SECRETS_KEY. Answers, problems (409 with
 * existingId, 400 with field errors, 404) and the Location header cross the wire; a token sealed by
 * one profiles node is read by the other; the internal actions answer from any node.
 */
import { startTestApp, uid, type TestApp } from "../helpers/app";
import { createTestDatabase, describeOverNats, TEST_NATS_URL, type TestDatabase } from "../helpers/db";
import { eventually } from "../helpers/eventually";
import { expectProblem } from "../helpers/expect";

describeOverNats("social profiles over NATS", () => {
  let tdb: TestDatabase;
  let gw: TestApp;
  let p1: TestApp;
  let p2: TestApp;
  const namespace = uid("profiles");

  beforeAll(async () => {
    tdb = await createTestDatabase();
    const cluster = { transporter: TEST_NATS_URL, databaseUrl: tdb.db.url };
    gw = await startTestApp({ services: ["gateway", "auth"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-gw` } });
    p1 = await startTestApp({ services: ["profiles"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-p1` } });
    p2 = await startTestApp({ services: ["profiles"], db: tdb.db, config: cluster, broker: { namespace, nodeID: `${namespace}-p2` } });
    await eventually(() => {
      const nodes = (gw.app.broker.registry.getServiceList({ onlyAvailable: true }) as Array<{ name: string; nodeID: string }>).filter(
        (s) => s.name === "profiles",
      );
      expect(nodes).toHaveLength(2);
    });
    await eventually(async () => expect((await gw.api.get("/social-profiles")).status).toBe(401));
  }, 60_000);

  afterAll(async () => {
    await p2?.stop();
    await p1?.stop();
    await gw?.stop();
    await tdb?.drop();
  });

  it("runs profiles on nodes of their own", () => {
    expect(gw.app.broker.getLocalService("profiles")).toBeFalsy();
    expect(p1.app.broker.getLocalService("gateway")).toBeFalsy();
    expect(p1.app.broker.transit?.connected).toBe(true);
  });

  it("creates, lists, replaces the token and deletes through a gateway on another node", async () => {
    const a = await gw.newAccount(["SOCIAL_PROFILES"]);
    const created = await a.api.post("/social-profiles", { network: "LINKEDIN", externalId: "urn:li:1", displayName: "Acme", accessToken: "li-token-1" });
    expect(created.status).toBe(201);
    expect(created.headers.get("location")).toBe(`/api/partner-gateway/v1/social-profiles/${created.body.id}`);
    const dup = await a.api.post("/social-profiles", { network: "LINKEDIN", externalId: "urn:li:1", accessToken: "li-token-2" });
    expectProblem(dup, 409);
    expect(dup.body.existingId).toBe(created.body.id);
    const bad = await a.api.post("/social-profiles", { network: "MYSPACE", externalId: null, accessToken: "t" });
    expectProblem(bad, 400);
    expect(bad.body.errors.map((e: { path: string }) => e.path).sort()).toEqual(["externalId", "network"]);
    expect((await a.api.get("/social-profiles?network=LINKEDIN")).body).toMatchObject({ total: 1, data: [created.body] });

    const revoked = await gw.app.broker.call("profiles.markRevoked", { companyId: a.companyId, id: created.body.id });
    expect(revoked).toMatchObject({ id: created.body.id, status: "REVOKED" });
    const put = await a.api.put(`/social-profiles/${created.body.id}/token`, { accessToken: "li-token-3" });
    expect(put.status).toBe(200);
    expect(put.body.status).toBe("CONNECTED");

    const b = await gw.newAccount(["SOCIAL_PROFILES"]);
    expectProblem(await b.api.get(`/social-profiles/${created.body.id}`), 404);
    expectProblem(await b.api.delete(`/social-profiles/${created.body.id}`), 404);
    expect((await a.api.delete(`/social-profiles/${created.body.id}`)).status).toBe(204);
    expectProblem(await a.api.get(`/social-profiles/${created.body.id}`), 404);
  });

  it("reads on either profiles node a token sealed by the other (one SECRETS_KEY)", async () => {
    const a = await gw.newAccount(["SOCIAL_PROFILES"]);
    const ids: string[] = [];
    // Round-robin spreads the creates over both nodes.
    for (let i = 0; i < 4; i++) {
      const res = await a.api.post("/social-profiles", { network: "TIKTOK", externalId: `tt-${i}`, accessToken: `tt-token-${i}` });
      expect(res.status).toBe(201);
      ids.push(res.body.id);
    }
    for (const node of [`${namespace}-p1`, `${namespace}-p2`]) {
      for (const [i, id] of ids.entries()) {
        expect(await gw.app.broker.call("profiles.accessToken", { companyId: a.companyId, id }, { nodeID: node })).toEqual({ accessToken: `tt-token-${i}` });
      }
    }
    await expect(gw.app.broker.call("profiles.accessToken", { companyId: "someone-else", id: ids[0] })).rejects.toMatchObject({
      code: 404,
      type: "PROFILE_NOT_FOUND",
    });
  });
});
