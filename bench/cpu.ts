/** CPU accounting for the benches, from /proc (Linux): per process, per process name, and the whole machine. */
import { readdirSync, readFileSync } from "node:fs";

const HZ = 100;

/** CPU seconds (user + system) used so far by the process `pid`, or by every process named `comm`. */
export function cpu(pid: number | null, comm?: string): number {
  const pids = pid !== null ? [String(pid)] : readdirSync("/proc").filter((d) => /^\d+$/.test(d));
  let ticks = 0;
  for (const p of pids) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, "utf8");
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      if (comm && name !== comm) continue;
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      ticks += Number(f[11]) + Number(f[12]);
    } catch {
      /* gone */
    }
  }
  return ticks / HZ;
}

/** CPU seconds of the whole machine (every core) so far. */
export function machineCpu(): number {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  return (f[0]! + f[1]! + f[2]! + f[5]! + f[6]!) / HZ;
}
