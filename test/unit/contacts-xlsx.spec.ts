/**
 * The XLSX reader of the import worker (contacts.xlsx.ts, contacts.xlsx-zip.ts), run on a thread of
 * its own test: which sheet it reads, the parts a workbook may lack, and the zip's limits. The
 * service side of the port answers every batch at once.
 */
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { MessageChannel } from "node:worker_threads";
import { zip } from "../helpers/zip";
import ExcelJS from "exceljs";
import runImport, { type WorkerMessage } from "../../services/contacts/contacts.worker";
import type { ImportRow, RowError } from "../../services/contacts/contacts.import-rows";

const MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main";
const sheetXml = (rows: string[][]) =>
  `<worksheet xmlns="${MAIN}"><sheetData>${rows
    .map(
      (r, i) => `<row r="${i + 1}">${r.map((v, j) => `<c r="${String.fromCharCode(65 + j)}${i + 1}" t="inlineStr"><is><t>${v}</t></is></c>`).join("")}</row>`,
    )
    .join("")}</sheetData></worksheet>`;
const workbookXml = (rIds: string[]) =>
  `<workbook xmlns="${MAIN}" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets>${rIds
    .map((id, i) => `<sheet name="S${i}" sheetId="${i + 1}" r:id="${id}"/>`)
    .join("")}</sheets></workbook>`;
const relsXml = (rels: Array<[string, string]>) =>
  `<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">${rels
    .map(([id, target]) => `<Relationship Id="${id}" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="${target}"/>`)
    .join("")}</Relationships>`;

let dir: string;
beforeAll(() => (dir = mkdtempSync(path.join(os.tmpdir(), "pgw-xlsx-"))));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Imports `file` as XLSX; answers the rows and errors the worker sent, or the error it ended with. */
async function read(file: Buffer, maxExpandedBytes = 64 * 1024 * 1024) {
  const at = path.join(dir, `${Math.random().toString(36).slice(2)}.xlsx`);
  writeFileSync(at, file);
  const { port1, port2 } = new MessageChannel();
  const rows: ImportRow[] = [];
  const errors: RowError[] = [];
  port1.on("message", (m: WorkerMessage) => {
    if (m.type !== "batch") return;
    rows.push(...m.rows);
    errors.push(...m.errors);
    port1.postMessage({ type: "ack" });
  });
  try {
    await runImport({ path: at, kind: "xlsx", mapping: null, customTypes: [], batchSize: 100, maxExpandedBytes, port: port2 });
    return { rows, errors };
  } finally {
    port1.close();
  }
}

describe("the XLSX import reader", () => {
  it("reads the first sheet in workbook.xml's order, not the lowest numbered part", async () => {
    const file = zip([
      { name: "xl/workbook.xml", data: workbookXml(["rId2", "rId1"]) },
      {
        name: "xl/_rels/workbook.xml.rels",
        data: relsXml([
          ["rId1", "worksheets/sheet1.xml"],
          ["rId2", "worksheets/sheet2.xml"],
        ]),
      },
      { name: "xl/worksheets/sheet1.xml", data: sheetXml([["email"], ["second@x.pt"]]) },
      { name: "xl/worksheets/sheet2.xml", data: sheetXml([["email"], ["first@x.pt"]]) },
    ]);
    const { rows } = await read(file);
    expect(rows.map((r) => r.email)).toEqual(["first@x.pt"]);
  });

  it("reads a first sheet whose part has another name, and one with no relationships at all", async () => {
    const named = zip([
      { name: "xl/workbook.xml", data: workbookXml(["rId7"]) },
      { name: "xl/_rels/workbook.xml.rels", data: relsXml([["rId7", "/xl/worksheets/contacts.xml"]]) },
      { name: "xl/worksheets/contacts.xml", data: sheetXml([["email"], ["named@x.pt"]]) },
    ]);
    expect((await read(named)).rows.map((r) => r.email)).toEqual(["named@x.pt"]);
    const bare = zip([
      { name: "xl/workbook.xml", data: `<workbook xmlns="${MAIN}"/>` },
      { name: "xl/worksheets/sheet3.xml", data: sheetXml([["email"], ["late@x.pt"]]) },
      { name: "xl/worksheets/sheet2.xml", data: sheetXml([["email"], ["low@x.pt"]]) },
    ]);
    expect((await read(bare)).rows.map((r) => r.email)).toEqual(["low@x.pt"]);
  });

  it("reads the shared strings of a workbook saved with its sheets before its shared strings, spilling nothing", async () => {
    const wb = new ExcelJS.Workbook();
    const ws = wb.addWorksheet("Contacts");
    ws.addRow(["Email", "First name", "Phone Number"]);
    ws.addRow(["shared@x.pt", "Ana", "+351912000050"]);
    wb.addWorksheet("Other").addRow(["email"]);
    const file = Buffer.from(await wb.xlsx.writeBuffer());
    const before = readdirSync(os.tmpdir()).filter((n) => n.startsWith("tmp-")).length;
    const { rows, errors } = await read(file);
    expect(errors).toEqual([]);
    expect(rows).toEqual([expect.objectContaining({ row: 1, email: "shared@x.pt", firstName: "Ana", phone: "+351912000050" })]);
    expect(readdirSync(os.tmpdir()).filter((n) => n.startsWith("tmp-")).length).toBeLessThanOrEqual(before);
  });

  it("refuses a part that inflates past the size the zip declares", async () => {
    const sheet = sheetXml([["email"], ["liar@x.pt"], ...Array.from({ length: 2000 }, () => ["pad@x.pt"])]);
    const file = zip([
      { name: "xl/workbook.xml", data: workbookXml(["rId1"]) },
      { name: "xl/_rels/workbook.xml.rels", data: relsXml([["rId1", "worksheets/sheet1.xml"]]) },
      { name: "xl/worksheets/sheet1.xml", data: sheet, declare: 1000 },
    ]);
    await expect(read(file)).rejects.toThrow(/^The workbook expands to more than its zip directory declares \(the part xl\/worksheets\/sheet1\.xml\)/);
  });

  it("refuses a workbook whose parts inflate past the budget, counted as they are read", async () => {
    const file = zip([
      { name: "xl/workbook.xml", data: workbookXml(["rId1"]) },
      { name: "xl/_rels/workbook.xml.rels", data: relsXml([["rId1", "worksheets/sheet1.xml"]]) },
      { name: "xl/worksheets/sheet1.xml", data: sheetXml([["email"], ...Array.from({ length: 20_000 }, (_, i) => [`u${i}@x.pt`])]) },
    ]);
    await expect(read(file, 256 * 1024)).rejects.toThrow(/^The workbook expands to more than 0\.3 MiB when unpacked/);
  });

  it("refuses damaged compressed data as a file it cannot read", async () => {
    const good = zip([
      { name: "xl/workbook.xml", data: workbookXml(["rId1"]) },
      { name: "xl/_rels/workbook.xml.rels", data: relsXml([["rId1", "worksheets/sheet1.xml"]]) },
      { name: "xl/worksheets/sheet1.xml", data: sheetXml([["email"], ...Array.from({ length: 500 }, (_, i) => [`u${i}@x.pt`])]) },
    ]);
    const start = good.indexOf("xl/worksheets/sheet1.xml") + 30;
    for (let i = start; i < start + 200; i++) good[i] = (good[i]! + 97) & 0xff;
    await expect(read(good)).rejects.toThrow(/^The (file cannot be read as XLSX|workbook expands)/);
  });
});
