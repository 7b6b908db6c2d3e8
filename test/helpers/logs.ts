/** Log lines of a test's brokers, parsed: pass `stream` to `loggerOptions(config, stream)` and read `lines`. */
import { PassThrough } from "node:stream";

export function capturedLogs(): { lines: Array<Record<string, unknown>>; stream: PassThrough } {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new PassThrough();
  let buffered = "";
  stream.on("data", (chunk: Buffer) => {
    buffered += chunk.toString();
    let i;
    while ((i = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, i);
      buffered = buffered.slice(i + 1);
      try {
        lines.push(JSON.parse(line));
      } catch {
        /* not JSON */
      }
    }
  });
  return { lines, stream };
}
