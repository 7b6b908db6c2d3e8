/**
 * A Server-Sent Events client for tests, over node:http (so a test can stop reading, as a slow
 * client does): events and comment lines as they arrive, parsed by the text/event-stream rules
 * (blocks separated by a blank line; `id:`, `event:`, `data:` fields; lines starting with `:` are comments).
 */
import http from "node:http";
import { eventually } from "./eventually";

export interface SseEvent {
  id: string | null;
  event: string;
  data: string;
  /** `data` parsed as JSON. */
  json: any;
}

export class SseClient {
  readonly events: SseEvent[] = [];
  readonly comments: string[] = [];
  /** Every byte received so far, as text. */
  raw = "";
  ended = false;
  private buffer = "";

  private constructor(
    readonly status: number,
    readonly headers: http.IncomingHttpHeaders,
    private readonly res: http.IncomingMessage,
    private readonly req: http.ClientRequest,
  ) {}

  /** Opens `url` (GET) with `headers`; answers once the status and headers are in (a problem's body is in `raw` once `ended`). */
  static open(url: string, headers: Record<string, string> = {}, o: { paused?: boolean } = {}): Promise<SseClient> {
    return new Promise((resolve, reject) => {
      const req = http.get(url, { headers: { accept: "text/event-stream", ...headers }, agent: false }, (res) => {
        const client = new SseClient(res.statusCode ?? 0, res.headers, res, req);
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => client.take(chunk));
        res.on("end", () => (client.ended = true));
        res.on("error", () => (client.ended = true));
        res.on("close", () => (client.ended = true));
        if (o.paused) res.pause();
        resolve(client);
      });
      req.on("error", reject);
    });
  }

  /** The problem body of a refused stream. */
  async body(): Promise<any> {
    await eventually(() => expect(this.ended).toBe(true));
    return JSON.parse(this.raw);
  }

  /** Stops reading: the server's writes pile up in the socket until it is full. */
  pause(): void {
    this.res.pause();
  }

  resume(): void {
    this.res.resume();
  }

  /** Waits until `n` events have arrived (10 s by default). */
  async waitForEvents(n: number, timeoutMs = 10_000): Promise<SseEvent[]> {
    await eventually(() => expect(this.events.length).toBeGreaterThanOrEqual(n), { timeoutMs, intervalMs: 20 });
    return this.events;
  }

  close(): void {
    this.req.destroy();
  }

  private take(chunk: string): void {
    this.raw += chunk;
    this.buffer += chunk;
    for (let end = this.buffer.indexOf("\n\n"); end >= 0; end = this.buffer.indexOf("\n\n")) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      let id: string | null = null;
      let event = "message";
      const data: string[] = [];
      let fields = 0;
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) {
          this.comments.push(line.slice(1).trim());
          continue;
        }
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (name === "id") id = value;
        else if (name === "event") event = value;
        else if (name === "data") data.push(value);
        else continue;
        fields++;
      }
      if (data.length > 0 || (fields > 0 && id !== null)) {
        const text = data.join("\n");
        let json: unknown = undefined;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        this.events.push({ id, event, data: text, json });
      }
    }
  }
}
