/**
 * Typed calls between services. A service that others call lists its callable actions in its
 * contract (`<name>.contract.ts`) as an action map, name -> what it takes and what it answers, and
 * exports the caller made from it here:
 *
 *   export interface MediaActions { "media.resolve": Action<ResolveMediaIn, ResolveMediaOut>; ... }
 *   export const callMedia = callerOf<MediaActions>();
 *   const { found } = await callMedia(ctx, "media.resolve", { ids }, { meta });
 *
 * The compiler then checks the action's name, its params and what the caller does with the answer;
 * the call itself is Moleculer's own `ctx.call`/`broker.call` with its options, nothing more.
 */
import type { CallingOptions } from "moleculer";

/** One action of a contract: its params and its answer. */
export interface Action<In, Out> {
  in: In;
  out: Out;
}

/** Whatever can make a call: a Context (a call made while serving another) or the broker. */
export interface Caller {
  call<TResult, TParams>(actionName: string, params?: TParams, opts?: CallingOptions): Promise<TResult>;
}

/** A caller of the actions of `Map`, checked by name. */
export function callerOf<Map extends { [Name in keyof Map]: Action<unknown, unknown> }>() {
  return <Name extends keyof Map & string>(via: Caller, name: Name, params: Map[Name]["in"], opts?: CallingOptions): Promise<Map[Name]["out"]> =>
    via.call<Map[Name]["out"], Map[Name]["in"]>(name, params, opts);
}
