/** What a failed import says (contacts' runner): the worker's own reasons, never a library's message. */
import { importFailureReason } from "../../services/contacts/contacts.runner";

const reason = (message: string) => importFailureReason(message) ?? "The file could not be read.";

describe("importFailureReason", () => {
  it.each([
    "The file cannot be read as CSV from data row 3 on: Quote Not Closed: the parsing is finished with an opening quote at line 4",
    "The file is empty: it has no header line.",
    "The workbook's first sheet is empty: it has no header row.",
    "The file holds no vCard (no BEGIN:VCARD line).",
    'The mapping names the column "Mobile", which the file\'s header does not have.',
    'The columns "email" and "E-Mail" both feed email; map one of them to null.',
    'The file has no column for phoneNumber or email (its header: "name", "city").',
    "The workbook expands to more than 64 MiB when unpacked (a zip bomb, or a workbook no import should unpack); save it as CSV instead.",
    "The workbook holds 20000 parts, more than the 10000 an import reads; save it as CSV instead.",
  ])("passes the worker's own reason: %s", (message) => {
    expect(importFailureReason(message)).toBe(message);
  });

  it("keeps an XLSX reader's message (from the zip and XML libraries) out of the reason", () => {
    const out = reason("The file cannot be read as XLSX: invalid distance too far back at /srv/pgw/imports/3f2a.xlsx");
    expect(out).toMatch(/^The file cannot be read as XLSX/);
    expect(out).not.toMatch(/distance|\/srv/);
  });

  it.each([
    // Node's own errors, some of which start with "The ", and carry internal paths or library words.
    'The value of "offset" is out of range. It must be >= 0 and <= 12. Received 4096',
    'The "path" argument must be of type string. Received undefined',
    "The operation was aborted",
    "ENOENT: no such file or directory, open '/var/lib/pgw/imports/6a1c.csv'",
    "End of data reached (data length = 0, asked index = 4). Corrupted zip ?",
    "The file /var/lib/pgw/imports/6a1c.csv is locked",
    "",
  ])("maps anything else to our words: %s", (message) => {
    expect(importFailureReason(message)).toBeNull();
    expect(reason(message)).toBe("The file could not be read.");
  });
});
