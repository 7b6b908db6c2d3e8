/**
 * The REPL node's view of other nodes' action parameters. Our actions declare `params` as a JSON
 * schema (validated by ajv on the node that runs the action), so moleculer-repl's `actions` listing,
 * which prints the keys of `params`, read "$id, type, additionalProperties, required, properties".
 * On the REPL's own node only (scripts/repl.ts), a middleware (Moleculer's documented
 * `transitMessageHandler` hook) replaces each action's `params` in the INFO packets it receives
 * with the parameter names: `{ customerMessageId: "required", channel: "required", ... }`. The REPL
 * node runs no action, so nothing validates against what it keeps; the nodes that run them keep
 * their schemas.
 */
import type { Middleware } from "moleculer";

type Schema = { properties?: Record<string, unknown>; required?: unknown; anyOf?: unknown; oneOf?: unknown; allOf?: unknown };

/** A schema's parameter names, each "required" or "optional" (every branch of anyOf/oneOf/allOf merged; required only where all say so). */
export function paramNames(schema: unknown): Record<string, "required" | "optional"> {
  const out: Record<string, "required" | "optional"> = {};
  const visit = (s: unknown, depth: number): void => {
    if (!s || typeof s !== "object" || depth > 4) return;
    const node = s as Schema;
    const required = new Set(Array.isArray(node.required) ? (node.required as string[]) : []);
    for (const name of Object.keys(node.properties ?? {})) out[name] = required.has(name) && out[name] !== "optional" ? "required" : "optional";
    for (const key of ["anyOf", "oneOf", "allOf"] as const)
      for (const branch of Array.isArray(node[key]) ? (node[key] as unknown[]) : []) visit(branch, depth + 1);
  };
  visit(schema, 0);
  return out;
}

interface InfoPayload {
  services?: Array<{ actions?: Record<string, { params?: unknown }> }>;
}

export function paramNamesMiddleware(): Middleware {
  return {
    name: "ReplParamNames",
    transitMessageHandler(next: (cmd: string, packet: { payload: unknown }) => unknown) {
      return (cmd: string, packet: { payload: unknown }) => {
        if (cmd === "INFO") {
          for (const service of (packet.payload as InfoPayload).services ?? []) {
            for (const action of Object.values(service.actions ?? {})) if (action.params) action.params = paramNames(action.params);
          }
        }
        return next(cmd, packet);
      };
    },
  } as unknown as Middleware;
}
