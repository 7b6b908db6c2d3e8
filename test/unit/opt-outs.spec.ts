/**
 * The pure parts of opt-outs (contract section 7): which inbound texts are keywords, the rule that
 * orders changes (a change older than the number's last one is ignored; an opt-out wins a tie; a
 * future time counts as now), and an import's `optedOut` cells.
 */
import { toOptedOut } from "../../services/contacts/contacts.import-rows";
import { foldChange, importedOptOuts, type Change, type OptOutState } from "../../services/contacts/contacts.optouts.queries";
import { keywordAction, keywordChanges } from "../../services/contacts/contacts.keywords";

describe("keywordAction", () => {
  it("takes the whole text, trimmed and case-insensitive, as an opt-out or opt-in keyword", () => {
    for (const t of ["STOP", " stop ", "StopAll", "STOP ALL", "stop   all", "unsubscribe", "Cancel", "END", "quit", "OPTOUT", "revoke", "\tSTOP\n"])
      expect([t, keywordAction(t)]).toEqual([t, "OPT_OUT"]);
    for (const t of ["START", "unstop", " Yes "]) expect([t, keywordAction(t)]).toEqual([t, "OPT_IN"]);
  });

  it("changes nothing for a sentence containing a keyword, punctuation, look-alike letters or no text", () => {
    for (const t of [
      "please stop",
      "STOP!",
      "stop.",
      "STOP STOP",
      "stop all now",
      "yes please",
      "OPT OUT",
      "ſtop",
      "ＳＴＯＰ",
      "",
      undefined,
      "STOP".repeat(100),
    ])
      expect([t, keywordAction(t)]).toEqual([t, null]);
  });

  it("makes a KEYWORD change of the sender's number, dated by receivedDate, for each keyword message only", () => {
    const item = (text: string | undefined, source: string) => ({
      companyId: "acme",
      messageId: source,
      source,
      destination: "agent",
      receivedDate: "2026-11-28T10:00:00Z",
      messageType: "TEXT",
      text,
    });
    expect(keywordChanges("RCS", [item("hi", "+351911111111"), item("STOP", "+351922222222"), item(undefined, "+351933333333")])).toEqual([
      { companyId: "acme", channel: "RCS", phoneNumber: "+351922222222", action: "OPT_OUT", source: "KEYWORD", at: "2026-11-28T10:00:00Z" },
    ]);
  });
});

describe("foldChange", () => {
  const now = Date.UTC(2026, 10, 28, 12);
  const change = (o: Partial<Change>): Change => ({
    companyId: "a",
    channel: "SMS",
    phoneNumber: "+351911111111",
    action: "OPT_OUT",
    source: "UPSTREAM",
    at: now - 1000,
    ...o,
  });
  const out = (o: Partial<OptOutState> = {}): OptOutState => ({ optedOut: true, source: "KEYWORD", createdAt: now - 5000, changedAt: now - 5000, ...o });

  it("opts a number out, keeping an active opt-out's source and start on a repeat", () => {
    expect(foldChange(undefined, change({}), now)).toEqual({
      changed: true,
      state: { optedOut: true, source: "UPSTREAM", createdAt: now - 1000, changedAt: now - 1000 },
    });
    expect(foldChange(out(), change({}), now)).toEqual({ changed: false, state: out({ changedAt: now - 1000 }) });
  });

  it("ignores a change older than the last one; an opt-out said at the same instant still counts, an opt-in does not", () => {
    const optedIn = out({ optedOut: false, changedAt: now - 1000 });
    expect(foldChange(optedIn, change({ at: now - 2000 }), now)).toEqual({ changed: false, state: optedIn });
    expect(foldChange(optedIn, change({ at: now - 1000 }), now).changed).toBe(true);
    const optedOut = out({ changedAt: now - 1000 });
    expect(foldChange(optedOut, change({ action: "OPT_IN", at: now - 1000 }), now)).toEqual({ changed: false, state: optedOut });
    expect(foldChange(optedOut, change({ action: "OPT_IN", at: now - 999 }), now)).toEqual({
      changed: true,
      state: { optedOut: false, source: "UPSTREAM", createdAt: now - 5000, changedAt: now - 999 },
    });
  });

  it("remembers an opt-in told with its time for a number never opted out, but not one made now", () => {
    expect(foldChange(undefined, change({ action: "OPT_IN" }), now)).toEqual({
      changed: false,
      state: { optedOut: false, source: "UPSTREAM", createdAt: now - 1000, changedAt: now - 1000 },
    });
    expect(foldChange(undefined, change({ action: "OPT_IN", at: null, source: "API" }), now)).toEqual({ changed: false, state: undefined });
  });

  it("counts a future time as now, and applies a change made now after whatever came before", () => {
    expect(foldChange(undefined, change({ at: now + 86_400_000 }), now).state).toMatchObject({ createdAt: now, changedAt: now });
    const late = out({ changedAt: now + 10 });
    expect(foldChange(late, change({ action: "OPT_IN", at: null, source: "API" }), now)).toEqual({
      changed: true,
      state: { ...late, optedOut: false, source: "API", changedAt: now + 10 },
    });
  });

  it("removes, for an import's opt-in, only an opt-out an import made", () => {
    const fromImport = change({ action: "OPT_IN", source: "IMPORT", at: null, onlyIfSource: "IMPORT" });
    expect(foldChange(out(), fromImport, now)).toEqual({ changed: false, state: out() });
    expect(foldChange(out({ source: "IMPORT" }), fromImport, now).state).toMatchObject({ optedOut: false });
    expect(foldChange(undefined, fromImport, now)).toEqual({ changed: false, state: undefined });
  });
});

describe("imports", () => {
  it("reads an optedOut cell as true (every channel), false or none (none), or a list of channels", () => {
    expect(toOptedOut("true")).toEqual(["SMS", "RCS", "WHATSAPP"]);
    expect(toOptedOut(true)).toEqual(["SMS", "RCS", "WHATSAPP"]);
    expect(toOptedOut("no")).toEqual([]);
    expect(toOptedOut(0)).toEqual([]);
    expect(toOptedOut("None")).toEqual([]);
    expect(toOptedOut("whatsapp, sms")).toEqual(["SMS", "WHATSAPP"]);
    expect(toOptedOut("RCS;RCS|SMS")).toEqual(["SMS", "RCS"]);
    for (const bad of ["maybe", "SMS,EMAIL", ",", 2, new Date(0)]) expect(toOptedOut(bad)).toBeUndefined();
  });

  it("states every channel of the number: opted out where listed, an import's opt-out removed elsewhere", () => {
    expect(importedOptOuts("a", [{ phone: "+351911111111", channels: ["RCS"] }]).map((c) => [c.channel, c.action, c.onlyIfSource])).toEqual([
      ["SMS", "OPT_IN", "IMPORT"],
      ["RCS", "OPT_OUT", undefined],
      ["WHATSAPP", "OPT_IN", "IMPORT"],
    ]);
  });
});
