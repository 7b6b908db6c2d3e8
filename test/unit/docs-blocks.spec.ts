/**
 * Every command block of the README and of docs/ is run by a test or says why it cannot run here:
 * a ```sh block is preceded by `<!-- docs:run <group> -->` (and the group's test names it) or
 * `<!-- docs:not-run <why> -->`, or it is the tour's (`walk:service`, between `walk:start` and
 * `walk:end`, run by test/integration/api-tour.spec.ts).
 */
import fs from "node:fs";
import path from "node:path";

const ROOT = path.join(__dirname, "../..");
const FILES = ["README.md", "clients/typescript/README.md", ...fs.readdirSync(path.join(ROOT, "docs")).map((f) => `docs/${f}`)].filter((f) =>
  f.endsWith(".md"),
);

/** The test file that runs each group's blocks. */
const GROUPS: Record<string, string> = {
  guide: "test/integration/docs-commands.spec.ts",
  admin: "test/integration/docs-commands.spec.ts",
  client: "test/e2e/client.spec.ts",
};

interface Block {
  file: string;
  line: number;
  marker: string;
}

function commandBlocks(file: string): Block[] {
  const lines = fs.readFileSync(path.join(ROOT, file), "utf8").split("\n");
  const out: Block[] = [];
  let inFence = false;
  let inWalk = false;
  lines.forEach((l, i) => {
    if (!inFence && l.trim() === "<!-- walk:start -->") inWalk = true;
    if (!inFence && l.trim() === "<!-- walk:end -->") inWalk = false;
    if (!l.startsWith("```")) return;
    if (inFence) {
      inFence = false;
      return;
    }
    inFence = true;
    if (!/^```(sh|bash|shell|console)\s*$/.test(l)) return;
    let j = i - 1;
    while (j >= 0 && lines[j]!.trim() === "") j--;
    const before = lines[j]?.trim() ?? "";
    out.push({ file, line: i + 1, marker: inWalk ? "walk" : before === "<!-- walk:service -->" ? "walk" : before });
  });
  return out;
}

const blocks = FILES.flatMap(commandBlocks);

it("finds the command blocks of the README and of docs/", () => {
  expect(blocks.length).toBeGreaterThan(20);
  expect(blocks.filter((b) => b.marker === "walk").length).toBeGreaterThanOrEqual(10);
});

it("has every command block run by a test, or say why it cannot run here", () => {
  const bad = blocks.filter((b) => b.marker !== "walk" && !/^<!-- docs:run [a-z]+ -->$/.test(b.marker) && !/^<!-- docs:not-run \S.{15,} -->$/.test(b.marker));
  expect(bad.map((b) => `${b.file}:${b.line} ${b.marker}`)).toEqual([]);
});

it("has each group's blocks named by the test that runs them", () => {
  const groups = new Set(blocks.map((b) => /^<!-- docs:run ([a-z]+) -->$/.exec(b.marker)?.[1]).filter((g): g is string => g != null));
  expect([...groups].sort()).toEqual(Object.keys(GROUPS).sort());
  for (const [group, test] of Object.entries(GROUPS)) {
    expect({ group, named: fs.readFileSync(path.join(ROOT, test), "utf8").includes(`docs:run ${group}`) }).toEqual({ group, named: true });
  }
});
