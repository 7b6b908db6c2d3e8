/**
 * Files under MEDIA_DIR: `<id>`, written whole or not at all (a temp name, fsync, rename, fsync of
 * the directory), read by range for a gateway, removed with their row.
 */
import { createWriteStream } from "node:fs";
import { mkdir, open, readdir, rename, rm, stat } from "node:fs/promises";
import path from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { Meter, type UploadedFile } from "../../lib/http/upload";
import { MEDIA_ID_RE } from "./media.contract";

export class MediaFiles {
  constructor(readonly dir: string) {}

  /** The file of a media id (an id is a UUID, never a path). */
  fileOf(id: string): string {
    if (!MEDIA_ID_RE.test(id)) throw new Error(`not a media id: ${id.slice(0, 80)}`);
    return path.join(this.dir, id.toLowerCase());
  }

  /** The upload's bytes as `<id>`, checked against what the gateway received; nothing is left behind on failure. */
  async keep(id: string, stream: Readable, file: UploadedFile): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    const target = this.fileOf(id);
    const part = `${target}.part`;
    const meter = new Meter();
    try {
      // flush: the data reaches the disk (fsync) before the file is closed.
      await pipeline(stream, meter, createWriteStream(part, { flags: "wx", flush: true }));
      if (meter.size !== file.size || meter.sha256() !== file.sha256) throw new Error(`the upload arrived incomplete (${meter.size} of ${file.size} bytes)`);
      await rename(part, target);
      const dir = await open(this.dir, "r");
      try {
        await dir.sync(); // the rename itself survives a crash
      } finally {
        await dir.close();
      }
    } catch (err) {
      await rm(part, { force: true });
      await rm(target, { force: true });
      throw err;
    }
  }

  /** `length` bytes from `offset`, or fewer at the end. */
  async read(id: string, offset: number, length: number): Promise<Buffer> {
    const fh = await open(this.fileOf(id), "r");
    try {
      const buf = Buffer.allocUnsafe(length);
      const { bytesRead } = await fh.read(buf, 0, length, offset);
      return buf.subarray(0, bytesRead);
    } finally {
      await fh.close();
    }
  }

  remove(id: string): Promise<void> {
    return rm(this.fileOf(id), { force: true });
  }

  /**
   * Files older than `graceMs` that no row names any more (deleted while this node was away) and
   * temp files of uploads that never ended: removed. `rowsOf` answers which of the ids have rows.
   */
  async sweep(rowsOf: (ids: string[]) => Promise<Set<string>>, graceMs: number): Promise<number> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    const old = async (name: string) => ((await stat(path.join(this.dir, name)).catch(() => null))?.mtimeMs ?? Date.now()) < Date.now() - graceMs;
    const candidates: string[] = [];
    for (const name of names) if ((MEDIA_ID_RE.test(name) || /\.part$/.test(name)) && (await old(name))) candidates.push(name);
    const known = await rowsOf(candidates.filter((n) => MEDIA_ID_RE.test(n)));
    const gone = candidates.filter((n) => !known.has(n));
    for (const name of gone) await rm(path.join(this.dir, name), { force: true });
    return gone.length;
  }
}
