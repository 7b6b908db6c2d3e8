/**
 * What campaigns and inbox replies call (media.contract.ts), through the broker with the caller's
 * account in meta as the gateway sets it: media.resolve, media.reference and media.release, and the
 * DELETE they guard (409 naming the referrers), including a reference racing a DELETE.
 */
import { existsSync } from "node:fs";
import path from "node:path";
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { expectProblem } from "../helpers/expect";
import { gif, jpeg, mp4, png, uploadMedia } from "../helpers/media";

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ services: ["gateway", "auth", "media"] });
});
afterAll(() => t?.stop());

const onDisk = (id: string) => path.join(t.config.mediaDir, id);
const account = () => t.newAccount(["MEDIA"]);

describe("media: references (media.resolve, media.reference, media.release)", () => {
  const call = <T>(action: string, params: unknown, a: Account) => t.app.broker.call(action, params, { meta: { companyId: a.companyId } }) as Promise<T>;

  it("resolves the account's ids with type and size; others, unknown and malformed ids are missing, in order", async () => {
    const a = await account();
    const b = await account();
    const img = (await uploadMedia(a, png(), "a.png")).body;
    const vid = (await uploadMedia(a, mp4(), "v.mp4")).body;
    const theirs = (await uploadMedia(b, gif(), "b.gif")).body;
    const unknown = "00000000-0000-4000-8000-000000000000";
    const out = await call<{ found: unknown[]; missing: string[] }>("media.resolve", { ids: [vid.id, theirs.id, "nope", img.id.toUpperCase(), unknown] }, a);
    expect(out.found).toEqual([
      { id: vid.id, mediaKey: `media/${vid.id}`, contentType: "video/mp4", kind: "video", size: vid.size },
      { id: img.id, mediaKey: `media/${img.id}`, contentType: "image/png", kind: "image", size: img.size },
    ]);
    expect(out.missing).toEqual([theirs.id, "nope", unknown]);
    await expect(call("media.resolve", { ids: [] }, a)).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
    await expect(call("media.resolve", { ids: [1] }, a)).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
    await expect(call("media.resolve", { ids: null }, a)).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
  });

  it("keeps referenced media from deletion (409 naming the referrers) until released; a reference replaces the owner's set", async () => {
    const a = await account();
    const m1 = (await uploadMedia(a, png(), "1.png")).body.id;
    const m2 = (await uploadMedia(a, jpeg(), "2.jpg")).body.id;
    const owner = "campaign:6f1c2a7e-3b4d-4e5f-8a9b-0c1d2e3f4a5b";
    expect(await call("media.reference", { owner, mediaIds: [m1, m2, m1] }, a)).toEqual({ referenced: [m1, m2] });
    expect(await call("media.reference", { owner: "reply:r-1", mediaIds: [m1] }, a)).toEqual({ referenced: [m1] });
    const busy = await a.api.delete(`/media/${m1}`);
    expectProblem(busy, 409);
    expect(busy.body.type).toMatch(/MEDIA_IN_USE|media-in-use/i);
    expect(busy.body.referencedBy).toEqual([owner, "reply:r-1"]);
    expect(busy.body.detail).toContain(owner);
    expect(existsSync(onDisk(m1))).toBe(true);
    // The campaign now refers to m2 only; the reply is released (twice: idempotent).
    expect(await call("media.reference", { owner, mediaIds: [m2] }, a)).toEqual({ referenced: [m2] });
    expect(await call("media.release", { owner: "reply:r-1" }, a)).toEqual({ released: 1 });
    expect(await call("media.release", { owner: "reply:r-1" }, a)).toEqual({ released: 0 });
    expect((await a.api.delete(`/media/${m1}`)).status).toBe(204);
    expectProblem(await a.api.delete(`/media/${m2}`), 409);
    expect(await call("media.release", { owner }, a)).toEqual({ released: 1 });
    expect((await a.api.delete(`/media/${m2}`)).status).toBe(204);
  });

  it("refuses an unknown, malformed or foreign id with a 400 naming it and changes nothing; a bad owner is a 400", async () => {
    const a = await account();
    const b = await account();
    const mine = (await uploadMedia(a, png(), "1.png")).body.id;
    const theirs = (await uploadMedia(b, png(), "2.png")).body.id;
    const owner = "campaign:c1";
    await call("media.reference", { owner, mediaIds: [mine] }, a);
    const err = (await call("media.reference", { owner, mediaIds: [theirs, "bad"] }, a).catch((e: unknown) => e)) as {
      code: number;
      type: string;
      message: string;
      data: { errors: Array<{ path: string }> };
    };
    expect(err).toMatchObject({ code: 400, type: "VALIDATION_ERROR" });
    expect(err.message).toContain(theirs);
    expect(err.data.errors.map((e) => e.path)).toEqual(["mediaIds[0]", "mediaIds[1]"]);
    // The earlier set stands: mine is still referenced, theirs is not.
    expectProblem(await a.api.delete(`/media/${mine}`), 409);
    expect((await b.api.delete(`/media/${theirs}`)).status).toBe(204);
    for (const bad of ["Campaign:1", "campaign:", "campaign:a b", "", "x".repeat(201), null, 5])
      await expect(call("media.reference", { owner: bad, mediaIds: [] }, a)).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
    await expect(call("media.reference", { owner, mediaIds: null }, a)).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
    await expect(call("media.release", { owner: null }, a)).rejects.toMatchObject({ type: "VALIDATION_ERROR" });
  });

  it("a reference racing a DELETE either wins (409) or finds the media gone (400), never a dangling reference", async () => {
    const a = await account();
    for (let i = 0; i < 5; i++) {
      const id = (await uploadMedia(a, png(), `${i}.png`)).body.id;
      const [ref, del] = await Promise.allSettled([call("media.reference", { owner: `campaign:r${i}`, mediaIds: [id] }, a), a.api.delete(`/media/${id}`)]);
      const deleted = del.status === "fulfilled" && del.value.status === 204;
      if (deleted) expect(ref).toMatchObject({ status: "rejected", reason: { code: 400 } });
      else {
        expect(ref.status).toBe("fulfilled");
        expect(del.status === "fulfilled" && del.value.status).toBe(409);
      }
      const [{ n }] = (await t.db.sequelize.query(
        `SELECT count(*)::int AS n FROM media_references r LEFT JOIN media m ON m.id = r.media_id WHERE m.id IS NULL`,
        {
          type: QueryTypes.SELECT,
        },
      )) as [{ n: number }];
      expect(n).toBe(0);
    }
  });
});
