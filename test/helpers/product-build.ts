/**
 * The product compiled to JavaScript once per content of its sources, for the tests that run its
 * nodes and commands as OS processes where the subject is not `npm start`'s own loading (the fault
 * suites' nodes, the admin commands): as the image runs them, plain Node on compiled files.
 *
 * Every `node --import tsx` process spends about 1.4 s of CPU more than the same process on compiled
 * files (tsx's loader thread sees every module; its CLI starts a second process), and the fault and
 * rotation suites start dozens of them. The compiler is jest's own (@swc/jest's @swc/core, with the
 * options jest.config.js gives it), so these processes run the very code the in-process tests run;
 * `npm run build` (tsc) stays covered by dist.spec. The files that test `npm start` (running,
 * shutdown, start-output, repl, readme-walk) still start it through tsx.
 *
 * The build lives under node_modules/.cache (so that packages resolve as from the project's root),
 * keyed by a hash of the sources, and appears under its final name in one step (a rename), so
 * parallel workers and runs never load a half-written one.
 */
import { transformFileSync, version as swcVersion } from "@swc/core";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";

const ROOT = path.join(__dirname, "../..");
const BUILDS = path.join(ROOT, "node_modules/.cache/pgw-test-build");
/** What tsconfig.build.json compiles (its `include`, less what it excludes). */
const SOURCE_DIRS = ["app", "lib", "mixins", "services", "migrations", "scripts", "types"];
/** jest.config.js's options for @swc/jest, so that these processes run the code the in-process tests run. */
const SWC_OPTIONS = { jsc: { target: "es2023", parser: { syntax: "typescript" } }, module: { type: "commonjs" }, sourceMaps: "inline", swcrc: false } as const;
/** A build (or a half-written one, `build-*`, of a run that was killed) unused this long is removed. */
const STALE_MS = 3600_000;
const EXCLUDED = new Set(["scripts/openapi.ts", "scripts/openapi-client.ts"]);

function sources(): string[] {
  const walk = (rel: string): string[] =>
    fs
      .readdirSync(path.join(ROOT, rel), { withFileTypes: true })
      .flatMap((e) =>
        e.isDirectory() ? walk(path.join(rel, e.name)) : e.isFile() && /\.ts$/.test(e.name) && !/\.d\.ts$/.test(e.name) ? [path.join(rel, e.name)] : [],
      );
  const top = fs.readdirSync(ROOT).filter((f) => /\.ts$/.test(f) && !/\.d\.ts$/.test(f));
  return [...top, ...SOURCE_DIRS.filter((d) => fs.existsSync(path.join(ROOT, d))).flatMap(walk)].filter((f) => !EXCLUDED.has(f)).sort();
}

let built: string | null = null;

function touch(dir: string): void {
  try {
    const now = new Date();
    fs.utimesSync(dir, now, now);
  } catch {
    /* removed meanwhile: the next call builds it again */
  }
}

/** The directory of the compiled product (mirroring the source tree), built first when missing. */
export function productBuild(): string {
  if (built && fs.existsSync(built)) return built;
  const files = sources();
  // The compiler, its options and this file are part of what a build is made of.
  const h = createHash("sha256").update(swcVersion).update(JSON.stringify(SWC_OPTIONS)).update(fs.readFileSync(__filename));
  for (const f of files)
    h.update(f)
      .update("\0")
      .update(fs.readFileSync(path.join(ROOT, f)))
      .update("\0");
  const dir = path.join(BUILDS, h.digest("hex").slice(0, 16));
  if (fs.existsSync(dir)) {
    touch(dir); // in use: not stale for another run's clean-up
    return (built = dir);
  }
  fs.mkdirSync(BUILDS, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(BUILDS, "build-"));
  try {
    for (const f of files) {
      const { code } = transformFileSync(path.join(ROOT, f), SWC_OPTIONS);
      const out = path.join(tmp, f.replace(/\.ts$/, ".js"));
      fs.mkdirSync(path.dirname(out), { recursive: true });
      fs.writeFileSync(out, code);
    }
    try {
      fs.renameSync(tmp, dir);
    } catch (err) {
      // Another worker or run finished the same build first: use its.
      if (!fs.existsSync(dir)) throw err;
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  // Builds of older sources, and half-written ones of killed runs, unused for an hour.
  for (const old of fs.readdirSync(BUILDS)) {
    const p = path.join(BUILDS, old);
    try {
      if (p !== dir && Date.now() - fs.statSync(p).mtimeMs > STALE_MS) fs.rmSync(p, { recursive: true, force: true });
    } catch {
      /* removed meanwhile by another run */
    }
  }
  return (built = dir);
}

/**
 * Node's arguments that run the product's `scripts/<name>` compiled, with the flags `npm start`
 * gives Node (package.json's start script).
 */
export function productScript(name: "start" | "admin" | "migrate"): string[] {
  return ["--experimental-async-context-frame", path.join(productBuild(), "scripts", `${name}.js`)];
}
