/**
 * The benches start the product with `npm start`'s own command (bench/service.ts startCommand): a
 * line `sh -c` runs, that keeps the script's variables and execs node (with a wrapper such as
 * taskset before it). When the script went from `exec node` to `VAR=x exec node`, the benches' own
 * `exec ${script}` stopped being a line sh can run, unnoticed; this fails instead.
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { startCommand } from "../../bench/service";

const script = JSON.parse(readFileSync(path.join(__dirname, "../../package.json"), "utf8")).scripts.start as string;
const [variables, node] = script.split(/\bexec\s+/);

it("keeps the script's variables, then execs the wrapper with node's command line", () => {
  expect(node).toMatch(/^node /);
  const line = startCommand("echo ");
  expect(line).toBe(`${variables}exec echo ${node}`);
  // sh runs it: the wrapper (echo here) gets node's command line.
  const run = spawnSync("sh", ["-c", line], { encoding: "utf8" });
  expect({ status: run.status, out: run.stdout.trim() }).toEqual({ status: 0, out: node });
  expect(spawnSync("sh", ["-c", startCommand("printenv MALLOC_TRIM_THRESHOLD_ #")], { encoding: "utf8" }).stdout.trim()).toBe("131072");
});
