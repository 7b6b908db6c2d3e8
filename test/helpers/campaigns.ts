/** Builders and waits for campaign tests: a list with contacts, a campaign body, waiting for a status. */
import type { Account, TestApp } from "./app";
import { contactIn, listIn } from "./builders";
import { eventually } from "./eventually";
import type { Http } from "./http";

/** A `POST /campaigns` body for `listIds` (SMS, a plain text), with overrides. */
export function campaignIn<O extends Record<string, unknown>>(listIds: number[], over: O = {} as O) {
  return {
    name: `Campaign ${Math.random().toString(36).slice(2, 8)}`,
    channel: "SMS",
    contactListIds: listIds,
    message: { text: "Hello {{firstName|there}}!" },
    ...over,
  };
}

/** A list (with `list` overrides) holding `n` fresh contacts (each with `contact(i)` overrides); answers the list id and contact ids. */
export async function seedList(api: Http, n: number, o: { list?: Record<string, unknown>; contact?: (i: number) => Record<string, unknown> } = {}) {
  const list = await api.post("/contacts/list", listIn(o.list ?? {}));
  if (list.status !== 201) throw new Error(`list: ${list.status} ${list.text}`);
  const contactIds: string[] = [];
  for (let i = 0; i < n; i++) {
    const c = await api.post("/contacts", contactIn(o.contact?.(i) ?? {}));
    if (c.status !== 201) throw new Error(`contact: ${c.status} ${c.text}`);
    contactIds.push(c.body.id);
  }
  if (n > 0) await addToList(api, list.body.id as number, contactIds);
  return { listId: list.body.id as number, contactIds };
}

export async function addToList(api: Http, listId: number, contactIds: string[]) {
  const r = await api.post("/contacts/list/contacts", { listIds: [listId], contactIds });
  if (r.status !== 201) throw new Error(`members: ${r.status} ${r.text}`);
}

/** Waits until the campaign reads `status`; answers it. */
export function untilStatus(a: Account, id: string, status: string, timeoutMs = 20_000) {
  return eventually(
    async () => {
      const r = await a.api.get(`/campaigns/${id}`);
      expect(r.body.status).toBe(status);
      return r.body;
    },
    { timeoutMs, intervalMs: 100 },
  );
}

/** The campaign's registered messages, per destination (how many each number got). */
export async function messagesPerDestination(t: TestApp, campaignId: string): Promise<Map<string, number>> {
  const rows = await t.db.sequelize.query<{ destination: string; n: string }>(
    `SELECT destination, count(*) AS n FROM messages WHERE campaign_id = $1 GROUP BY destination`,
    { bind: [campaignId], type: "SELECT" as never },
  );
  return new Map(rows.map((r) => [r.destination, Number(r.n)]));
}
