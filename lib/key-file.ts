/**
 * A secret generated once into a file of DATA_DIR (mode 0600) when the operator set none: whichever
 * process comes first writes it, every other one (a second service, the admin command) reads the
 * same. The file appears whole or not at all (written aside, then hard-linked into place, which
 * fails if it exists), so a reader never sees it half written.
 */
import { randomBytes } from "node:crypto";
import { linkSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import path from "node:path";

const NO_HARD_LINKS = new Set(["EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS"]);

function writeExclusive(file: string, value: string): void {
  try {
    writeFileSync(file, value, { flag: "wx", mode: 0o600 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
}

/** The trimmed content of `dir/name`, created with `generate()` (mode 0600) if it does not exist yet. */
export function keyFileOnce(dir: string, name: string, generate: () => string): string {
  const file = path.join(dir, name);
  mkdirSync(dir, { recursive: true });
  const aside = path.join(dir, `.${name}.${process.pid}.${randomBytes(6).toString("hex")}`);
  const value = generate();
  writeFileSync(aside, value, { flag: "wx", mode: 0o600 });
  try {
    linkSync(aside, file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== "EEXIST" && !NO_HARD_LINKS.has(code ?? "")) throw err;
    // A volume without hard links: an exclusive create, as before (a reader may then meet it half written).
    if (code !== "EEXIST") writeExclusive(file, value);
  } finally {
    unlinkSync(aside);
  }
  return readFileSync(file, "utf8").trim();
}
