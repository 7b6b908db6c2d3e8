/** What moleculer-web hangs on a request, and what the gateway adds. */
import type { IncomingMessage } from "node:http";
import type { Context } from "moleculer";
import type { ApiAction, AuthMeta } from "../../lib/api";

/** A route's alias: one method on one path. */
export interface Alias {
  path: string;
  fullPath?: string;
  method: string;
  match(url: string): Record<string, string> | false;
}

export interface GwRoute {
  opts: { name?: string };
  callOptions?: Record<string, unknown>;
  onAfterCall?: unknown;
}

export interface GwRequest extends IncomingMessage {
  $requestId: string;
  $ctx: Context<unknown, AuthMeta>;
  $action?: ApiAction & { name: string };
  $alias?: Alias;
  $endpoint?: unknown;
  $route?: GwRoute;
  $params?: Record<string, unknown>;
  parsedUrl?: string;
  query?: Record<string, unknown>;
  body?: unknown;
  /** Writes the request's access log line and metrics, once (at the answer's end, or when an event stream starts). */
  $logAccess?: () => void;
}
