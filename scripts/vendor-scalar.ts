/**
 * `npm run vendor:scalar -- <version>`: refreshes vendor/scalar from the npm registry. The gateway
 * serves one file of `@scalar/api-reference` (its standalone browser bundle, for /docs); the
 * package as a dependency brought 257 packages and 295 MB to every `npm install` for it. Here the
 * package's tarball is fetched (`npm pack`), that one file taken out, its source-map reference
 * dropped (the map is not served) and stored gzipped, beside the version it came from.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { gzipSync } from "node:zlib";

const version = process.argv[2];
if (!version || !/^\d+\.\d+\.\d+$/.test(version)) {
  process.stderr.write("usage: npm run vendor:scalar -- <version, e.g. 1.72.1>\n");
  process.exit(2);
}
const out = path.join(__dirname, "..", "vendor", "scalar");
const tmp = mkdtempSync(path.join(tmpdir(), "pgw-scalar-"));
try {
  const tarball = execFileSync("npm", ["pack", `@scalar/api-reference@${version}`, "--pack-destination", tmp, "--silent"], { encoding: "utf8" }).trim();
  execFileSync("tar", ["-xzf", path.join(tmp, tarball), "-C", tmp, "package/dist/browser/standalone.js", "package/package.json"]);
  const pkg = JSON.parse(readFileSync(path.join(tmp, "package", "package.json"), "utf8")) as { name: string; version: string; license: string };
  const text = readFileSync(path.join(tmp, "package", "dist", "browser", "standalone.js"), "utf8").replace(/\n\/\/# sourceMappingURL=\S+\s*$/, "\n");
  writeFileSync(path.join(out, "standalone.js.gz"), gzipSync(Buffer.from(text), { level: 9 }));
  writeFileSync(
    path.join(out, "version.json"),
    `${JSON.stringify({ name: pkg.name, version: pkg.version, license: pkg.license, file: "dist/browser/standalone.js", bytes: Buffer.byteLength(text) }, null, 2)}\n`,
  );
  process.stdout.write(`vendor/scalar: ${pkg.name}@${pkg.version}\n`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
