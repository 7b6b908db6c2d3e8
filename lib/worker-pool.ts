/**
 * A piscina pool of a service's worker module, the same way under `npm start`, jest and a compiled
 * build: `<dir>/<name>.ts` (or .js), TypeScript loaded through tsx in the worker threads too.
 */
import path from "node:path";
import { Piscina } from "piscina";

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
  return new Piscina({ filename, minThreads: 0, execArgv: [...process.execArgv, ...tsx], ...options });
}
