/**
 * A secret generated once into a file of DATA_DIR (mode 0600) when the operator set none: whichever
 * process comes first writes it, every other one (a second service, the admin command) reads the
 * same. An existing file is only read (never written, nothing created beside it, so a read-only
 * DATA_DIR that holds the key works); it is opened without following a symlink, and a mode looser
 * than 0600 is warned about. Only when it does not exist is a key generated: written aside, then
 * hard-linked into place (which fails if it exists), so a reader never sees it half written; the
 * aside file is removed whatever happens.
 */
import { randomBytes } from "node:crypto";
import { closeSync, constants, fstatSync, linkSync, mkdirSync, openSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import path from "node:path";

const NO_HARD_LINKS = new Set(["EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS"]);

export type Warn = (message: string) => void;
const defaultWarn: Warn = (message) => process.emitWarning(message, { code: "PGW_KEY_FILE" });

function writeExclusive(file: string, value: string): void {
  try {
    writeFileSync(file, value, { flag: "wx", mode: 0o600 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
}

function unlinkQuietly(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    // Already gone (or never written).
  }
}

/**
 * The trimmed content of an existing key file, or null when there is none. A symlink is refused
 * (O_NOFOLLOW), and a file others may read or write is used with a warning.
 */
export function readKeyFile(file: string, warn: Warn = defaultWarn): string | null {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return null;
    if (code === "ELOOP") throw new Error(`${file} is a symbolic link; a key file must be a regular file`);
    throw err;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(`${file} is not a regular file`);
    if (st.mode & 0o077) warn(`${file} has mode ${(st.mode & 0o777).toString(8).padStart(4, "0")}; a key file should be 0600 (chmod 600 ${file})`);
    return readFileSync(fd, "utf8").trim();
  } finally {
    closeSync(fd);
  }
}

/** The trimmed content of `dir/name`, created with `generate()` (mode 0600) only if it does not exist yet. */
export function keyFileOnce(dir: string, name: string, generate: () => string, warn: Warn = defaultWarn): string {
  const file = path.join(dir, name);
  const existing = readKeyFile(file, warn);
  if (existing !== null) return existing;
  mkdirSync(dir, { recursive: true });
  const aside = path.join(dir, `.${name}.${process.pid}.${randomBytes(6).toString("hex")}`);
  const value = generate();
  try {
    writeFileSync(aside, value, { flag: "wx", mode: 0o600 });
    try {
      linkSync(aside, file);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== "EEXIST" && !NO_HARD_LINKS.has(code ?? "")) throw err;
      // A volume without hard links: an exclusive create, as before (a reader may then meet it half written).
      if (code !== "EEXIST") writeExclusive(file, value);
    }
  } finally {
    unlinkQuietly(aside);
  }
  const written = readKeyFile(file, warn);
  if (written === null) throw new Error(`${file} vanished right after it was written`);
  return written;
}
