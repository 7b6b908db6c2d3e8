/** Exports as a partner runs them: create, then poll GET /exports/{id} until it gives the download URL. */
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
  for (const end = Date.now() + timeoutMs; Date.now() < end;) {
    const res = await api.get(`/exports/${exportId}`);
    if (res.status === 200) return { exportId, url: `http://127.0.0.1:${port}${new URL(res.body.downloadUrl).pathname}` };
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`export ${exportId} was not available within ${timeoutMs} ms`);
}
