/** Exports as a partner runs them: create, then poll GET /exports/{id} until it gives the download URL. */
import { eventually } from "./eventually";
import type { Http } from "./http";

/** POSTs `createPath` (202 expected) and polls until the export is available: its download URL's path, on `port`. */
export async function exportedFileUrl(
  api: Http,
  port: number,
  createPath: string,
  body: unknown = {},
  timeoutMs = 60_000,
): Promise<{ exportId: string; url: string }> {
  const created = await api.post(createPath, body);
  if (created.status !== 202) throw new Error(`${createPath} answered ${created.status}: ${created.text}`);
  const exportId = created.body.exportId as string;
  return eventually(
    async () => {
      const res = await api.get(`/exports/${exportId}`);
      if (res.status !== 200) throw new Error(`export ${exportId} was not available within ${timeoutMs} ms (last answer ${res.status})`);
      return { exportId, url: `http://127.0.0.1:${port}${new URL(res.body.downloadUrl).pathname}` };
    },
    { timeoutMs },
  );
}

/** The header row of a message-history export (contract: the history's fields, in this order). */
export const HISTORY_HEADER = [
  "customerMessageId",
  "channel",
  "destination",
  "sentAt",
  "deliveryStatus",
  "statusCode",
  "description",
  "deliveryDate",
  "readAt",
  "text",
  "campaignId",
  "totalParts",
  "price",
  "simulation",
];
