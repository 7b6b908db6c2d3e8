/**
 * The top frames of a V8 CPU profile (`node --cpu-prof`) by self time, with their share of the
 * samples: what a flame graph shows widest at its tips, as text for a closing note or a commit.
 *
 *   npx tsx bench/profile/top.ts <file.cpuprofile> [count]
 */
import fs from "node:fs";
import path from "node:path";

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: Node[];
  samples: number[];
}

const [file, countArg] = process.argv.slice(2);
if (!file) {
  process.stderr.write("usage: tsx bench/profile/top.ts <file.cpuprofile> [count]\n");
  process.exit(2);
}
const profile = JSON.parse(fs.readFileSync(file, "utf8")) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const self = new Map<string, number>();
for (const id of profile.samples) {
  const f = byId.get(id)!.callFrame;
  const where = f.url ? `${path.basename(f.url)}:${f.lineNumber + 1}` : "";
  const name = `${f.functionName || "(anonymous)"} ${where}`.trim();
  self.set(name, (self.get(name) ?? 0) + 1);
}
const total = profile.samples.length;
const rows = [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, Number(countArg ?? 15));
for (const [name, n] of rows) console.log(`${((100 * n) / total).toFixed(1).padStart(5)} %  ${name}`);
console.log(`(${total} samples)`);
