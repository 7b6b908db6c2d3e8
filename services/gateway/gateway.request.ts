/** What moleculer-web hangs on a request (its documented `req.$ctx`, `$params`, `parsedUrl`, `query`), and what the gateway adds. */
import type { IncomingMessage } from "node:http";
import type { Context } from "moleculer";
import type { ApiAction, AuthMeta } from "../../lib/http/api";

export interface GwRequest extends IncomingMessage {
  $requestId: string;
  $ctx: Context<unknown, AuthMeta>;
  /** The action of the route that owns the URL (set by the partner route's alias, gateway.calls.ts). */
  $action?: ApiAction & { name: string };
  /** The route's path template, for the access log and metrics ("unmatched" when unset). */
  $apiRoute?: string;
  /** moleculer-web's params; with `mergeParams: false`, the path's own are in `params`. */
  $params?: { params?: Record<string, string> };
  parsedUrl?: string;
  query?: Record<string, unknown>;
  body?: unknown;
  /** Writes the request's access log line and metrics, once (at the answer's end, or when an event stream starts). */
  $logAccess?: () => void;
}
