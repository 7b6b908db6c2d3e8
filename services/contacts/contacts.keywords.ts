/**
 * Opt-out keywords (contract section 7): an inbound message whose whole text, trimmed and
 * case-insensitive, is STOP, STOPALL, STOP ALL, UNSUBSCRIBE, CANCEL, END, QUIT, OPTOUT or REVOKE opts
 * its sender's number out of that channel for that account; START, UNSTOP or YES opts it back in; a
 * sentence that merely contains one ("please stop") changes nothing. The message itself is stored
 * and announced (INBOUND) as any other.
 *
 * Opt-outs are the contacts service's (`contacts.applyOptOuts`), and so is this rule; other services
 * use it through contacts.contract.ts. Tracking's ingress hands a request's keywords over before it
 * stores the request's inbound messages (in the inbound feed the inbox follows), and answers only
 * once both are committed; the inbox does the same for the simulator's `inbox.ingest` calls. A
 * contacts service that cannot be reached fails the request (503, the upstream sends it again; the
 * messages and the opt-out are idempotent), so an opt-out is never lost with a node that dies after
 * answering, and the inbox, following the feed, never waits for contacts. Each change carries the message's receivedDate, so a STOP delivered again after a
 * START does not undo it.
 */
import type { Caller } from "../../lib/bus/calls";
import { ApiError, UNAVAILABLE_RETRY_AFTER_S } from "../../lib/errors";
import { callContacts, type OptOutAction, type OptOutChange } from "./contacts.contract";

/** An inbound message as far as its keyword goes. */
export interface KeywordMessage {
  companyId: string;
  source: string;
  text?: string;
  receivedDate: string;
}
type KeywordChannel = "RCS" | "WHATSAPP";

const OPT_OUT_WORDS = new Set(["STOP", "STOPALL", "STOP ALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "OPTOUT", "REVOKE"]);
const OPT_IN_WORDS = new Set(["START", "UNSTOP", "YES"]);
/** One or two words of ASCII letters: every keyword, and nothing a longer text could hide behind. */
const KEYWORD_SHAPE = /^[A-Za-z]{1,16}(?: {1,8}[A-Za-z]{1,16})?$/;

/** What a message's text says about consent: OPT_OUT, OPT_IN, or null for anything else. */
export function keywordAction(text: string | undefined): OptOutAction | null {
  if (text === undefined || text.length > 64) return null;
  const trimmed = text.trim();
  if (!KEYWORD_SHAPE.test(trimmed)) return null;
  const word = trimmed.toUpperCase().replace(/ +/g, " ");
  return OPT_OUT_WORDS.has(word) ? "OPT_OUT" : OPT_IN_WORDS.has(word) ? "OPT_IN" : null;
}

/** The opt-out changes a call's messages make (source KEYWORD, dated by receivedDate). */
export function keywordChanges(channel: KeywordChannel, items: readonly KeywordMessage[]): OptOutChange[] {
  const out: OptOutChange[] = [];
  for (const it of items) {
    const action = keywordAction(it.text);
    if (action) out.push({ companyId: it.companyId, channel, phoneNumber: it.source, action, source: "KEYWORD", at: it.receivedDate });
  }
  return out;
}

/** Moleculer's errors for a service no node serves or that did not answer (by name or by type: a remote error is a plain object). */
const UNREACHABLE = new Set([
  "ServiceNotFoundError",
  "ServiceNotAvailableError",
  "RequestTimeoutError",
  "RequestRejectedError",
  "SERVICE_NOT_FOUND",
  "SERVICE_NOT_AVAILABLE",
  "REQUEST_TIMEOUT",
  "REQUEST_REJECTED",
]);

/** Hands a call's keywords to contacts and resolves once they are committed; 503 (retry) when contacts cannot be reached. */
export async function applyKeywords(ctx: Caller, channel: KeywordChannel, items: readonly KeywordMessage[]): Promise<void> {
  const changes = keywordChanges(channel, items);
  if (changes.length === 0) return;
  try {
    await callContacts(ctx, "contacts.applyOptOuts", { items: changes });
  } catch (err) {
    const e = err as { name?: string; type?: string };
    if (UNREACHABLE.has(e?.name ?? "") || UNREACHABLE.has(e?.type ?? ""))
      throw new ApiError("SERVICE_UNAVAILABLE", "An opt-out keyword cannot be recorded right now (no contacts node answers); nothing was stored. Try again.", {
        retryAfter: UNAVAILABLE_RETRY_AFTER_S,
      });
    throw err;
  }
}
