/**
 * The vCard reader of the import worker (contacts.worker.ts): one contact per card (3.0 or 4.0),
 * read line by line so that no card larger than MAX_RECORD_BYTES is ever held whole.
 */
import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";
import { buildRow, type Cell } from "./contacts.import-rows";
import { MAX_RECORD_BYTES, type BatchSender, type CustomTypes, type ImportTask } from "./contacts.import-batch";

/** A vCard's first and last lines (anchored, one way to match: linear on a line of any length). */
export const VCARD_BEGIN = /^BEGIN:VCARD\s*$/i;
export const VCARD_END = /^END:VCARD\s*$/i;

/** The fields of one vCard (3.0 or 4.0) as cells of the fixed columns below. */
const VCARD_COLUMNS = ["firstName", "lastName", "phoneNumber", "email", "gender"];

type JProp = [string, Record<string, string | string[]>, string, ...unknown[]];

function pick(props: JProp[], name: string): JProp | undefined {
  const all = props.filter((p) => p[0] === name);
  const typesOf = (p: JProp) => ([] as string[]).concat(p[1].type ?? []).map((t) => t.toLowerCase());
  return all.find((p) => p[1].pref !== undefined || typesOf(p).includes("pref")) ?? all.find((p) => typesOf(p).includes("cell")) ?? all[0];
}

const textOf = (v: unknown): string => (Array.isArray(v) ? v.map(textOf).filter(Boolean).join(" ") : v == null ? "" : String(v));

async function vcardCells(text: string): Promise<Cell[]> {
  const ICAL = (await import("ical.js")).default;
  const parsed = ICAL.parse(text) as unknown;
  const card = (Array.isArray(parsed) && parsed[0] === "vcard" ? parsed : (parsed as unknown[])[0]) as [string, JProp[]];
  if (!Array.isArray(card) || card[0] !== "vcard") throw new Error("it is not a vCard");
  const props = card[1];
  const version = textOf(pick(props, "version")?.[3]);
  if (version && version !== "3.0" && version !== "4.0") throw new Error(`vCard ${version} is not supported (3.0 or 4.0)`);
  let first: string | undefined;
  let last: string | undefined;
  const n = pick(props, "n")?.[3];
  if (Array.isArray(n)) {
    last = textOf(n[0]) || undefined;
    first = textOf(n[1]) || undefined;
  }
  if (!first && !last) {
    const fn = textOf(pick(props, "fn")?.[3]).trim();
    const at = fn.lastIndexOf(" ");
    if (at > 0) [first, last] = [fn.slice(0, at), fn.slice(at + 1)];
    else if (fn) first = fn;
  }
  const tel = textOf(pick(props, "tel")?.[3]).replace(/^tel:/i, "").split(";")[0];
  const email = textOf(pick(props, "email")?.[3]).replace(/^mailto:/i, "");
  const sex = textOf(pick(props, "gender")?.[3]).trim().charAt(0).toUpperCase();
  const gender = sex === "M" ? "MALE" : sex === "F" ? "FEMALE" : sex === "O" ? "OTHER" : undefined;
  return [first, last, tel || undefined, email || undefined, gender];
}

export async function importVcard(task: ImportTask, out: BatchSender, types: CustomTypes): Promise<void> {
  const input = createReadStream(task.path, { encoding: "utf8" });
  const lines = createInterface({ input, crlfDelay: Infinity });
  let card: string[] | null = null;
  let bytes = 0;
  let row = 0;
  try {
    for await (const raw of lines as AsyncIterable<string>) {
      const line: string = row === 0 && card === null ? raw.replace(/^\uFEFF/, "") : raw;
      if (card === null) {
        if (VCARD_BEGIN.test(line)) {
          card = [line];
          bytes = line.length;
          row++;
        }
        continue;
      }
      if (bytes <= MAX_RECORD_BYTES) card.push(line);
      bytes += line.length;
      if (!VCARD_END.test(line)) continue;
      const text = card.join("\r\n") + "\r\n";
      card = null;
      if (bytes > MAX_RECORD_BYTES) {
        await out.add({ row, message: "the vCard is larger than 1 MiB" });
        continue;
      }
      let cells: Cell[];
      try {
        cells = await vcardCells(text);
      } catch (err) {
        await out.add({ row, message: `the vCard cannot be read: ${(err as Error).message.slice(0, 300)}` });
        continue;
      }
      await out.add(buildRow(row, cells, VCARD_COLUMNS, types));
    }
  } finally {
    lines.close();
    input.destroy();
  }
  if (card !== null) await out.add({ row, message: "the vCard has no END:VCARD line" });
  if (row === 0) throw new Error("The file holds no vCard (no BEGIN:VCARD line).");
}
