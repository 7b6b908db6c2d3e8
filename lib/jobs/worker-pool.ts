/**
 * A piscina pool of a service's worker module, the same way under `npm start`, jest and a compiled
 * build: `<dir>/<name>.ts` (or .js), TypeScript loaded through tsx in the worker threads too.
 * Every task is run with a time budget (an AbortSignal passed to `pool.run`): piscina stops the
 * thread of a task past it, and the runner ends the job with a reason that says so.
 */
import path from "node:path";
import { Piscina } from "piscina";
import { trackPool, untrackPool } from "../observability/runtime-metrics";

export function workerPool(
  dir: string,
  name: string,
  options: {
    maxThreads: number;
    idleTimeout: number;
    resourceLimits: NonNullable<ConstructorParameters<typeof Piscina>[0]>["resourceLimits"];
    env?: NodeJS.ProcessEnv;
  },
): Piscina {
  const filename = path.resolve(dir, `${name}${path.extname(__filename)}`);
  const tsx = filename.endsWith(".ts") && !process.execArgv.some((a) => a.includes("tsx")) ? ["--import", "tsx"] : [];
  return trackPool(new Piscina({ filename, minThreads: 0, execArgv: [...process.execArgv, ...tsx], ...options }), name);
}

/** A task's time budget in words, for the reason a job ends with ("2 hours 10 minutes", "30 minutes", "5 seconds"). */
export function duration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const s = Math.round(ms / 1000);
  const parts: Array<[number, string]> = [
    [Math.floor(s / 3600), "hour"],
    [Math.floor((s % 3600) / 60), "minute"],
    [s % 60, "second"],
  ];
  return parts
    .filter(([n]) => n > 0)
    .map(([n, unit]) => `${n} ${unit}${n === 1 ? "" : "s"}`)
    .join(" ");
}

/** Destroys a pool made by workerPool, and stops counting it on /metrics. */
export async function destroyPool(pool: Piscina | null | undefined): Promise<void> {
  if (!pool) return;
  untrackPool(pool);
  await pool.destroy().catch(() => undefined);
}
