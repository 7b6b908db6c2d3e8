/**
 * What campaigns and inbox replies call (media.contract.ts), through the broker with the caller's
 * account in meta as the gateway sets it: media.resolve, media.reference and media.release, and the
 * DELETE they guard (409 naming the referrers), including a reference racing a DELETE.
 */
import { existsSync } from "node:fs";
import path from "node:path";
import { QueryTypes } from "sequelize";
import { startTestApp, type Account, type TestApp } from "../helpers/app";
import { itWithPostgres } from "../helpers/db";
import { expectProblem } from "../helpers/expect";
import { gif, jpeg, mp4, png, uploadMedia } from "../helpers/media";
import { replaceReferences, shareLockMedia } from "../../services/media/media.queries";

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

  // On PGlite (one connection) the two run one after the other: the race needs PostgreSQL.
  itWithPostgres("a reference racing a DELETE either wins (409) or finds the media gone (400); never a 500, and the rows agree with the answers", async () => {
    const a = await account();
    for (let i = 0; i < 10; i++) {
      const id = (await uploadMedia(a, png(), `${i}.png`)).body.id;
      const owner = `campaign:r${i}`;
      const [ref, del] = await Promise.allSettled([call("media.reference", { owner, mediaIds: [id] }, a), a.api.delete(`/media/${id}`)]);
      expect(del.status).toBe("fulfilled");
      const status = del.status === "fulfilled" ? del.value.status : 0;
      expect([204, 409]).toContain(status);
      const media = await t.db.sequelize.query(`SELECT id FROM media WHERE id = $1`, { bind: [id], type: QueryTypes.SELECT });
      const refs = await t.db.sequelize.query(`SELECT owner FROM media_references WHERE media_id = $1`, { bind: [id], type: QueryTypes.SELECT });
      if (status === 204) {
        expect(ref).toMatchObject({ status: "rejected", reason: { code: 400, type: "VALIDATION_ERROR" } });
        expect([media.length, refs.length, existsSync(onDisk(id))]).toEqual([0, 0, false]);
      } else {
        expect(ref.status).toBe("fulfilled");
        expect(refs).toEqual([{ owner }]);
        expect(media.length).toBe(1);
      }
    }
  });

  itWithPostgres("a DELETE waits for a reference being written, then answers 409 naming it", async () => {
    const a = await account();
    const id = (await uploadMedia(a, png(), "held.png")).body.id;
    const sequelize = t.db.sequelize;
    let commit!: () => void;
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    const held = sequelize.transaction(async (transaction) => {
      // What media.reference does, held open: the media row locked FOR SHARE, the reference written.
      expect(await shareLockMedia(sequelize, a.companyId, [id], transaction)).toEqual(new Set([id]));
      await replaceReferences(sequelize, a.companyId, "campaign:held", [id], transaction);
      locked();
      await new Promise<void>((resolve) => (commit = resolve));
    });
    await isLocked;
    const deleting = a.api.delete(`/media/${id}`);
    const first = await Promise.race([deleting.then(() => "answered"), new Promise((resolve) => setTimeout(() => resolve("waiting"), 500))]);
    expect(first).toBe("waiting"); // DELETE's FOR UPDATE waits for the reference's transaction
    commit();
    await held;
    const res = await deleting;
    expectProblem(res, 409);
    expect(res.body.referencedBy).toEqual(["campaign:held"]);
    expect(existsSync(onDisk(id))).toBe(true);
  });
});
