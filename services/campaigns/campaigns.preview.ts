/**
 * The dry run (GET /campaigns/{id}/preview) and the statistics (GET /campaigns/stats): both read,
 * neither stores nor sends anything.
 */
import { statusByCode } from "../../lib/messaging/channels";
import type { Exec } from "../../lib/db/db";
import { smsInfo } from "../../lib/messaging/sms";
import type { Context } from "moleculer";
import { callInbox } from "../inbox/inbox.contract";
import { callTracking, type CampaignStatsFilters, type CampaignStatsIn } from "../tracking/tracking.contract";
import type { CampaignRow } from "./campaigns.models";
import { previewAudience, previewSamples, previewSource, previewTotals, previewUnsure, type PreviewTotals } from "./campaigns.queries";
import type { PreviewOut, StatsOut } from "./campaigns.schemas";
import { fits, MAX_TEXT, parseText, render, type Vars } from "./campaigns.text";

const SAMPLES = 5;

export interface PreviewOptions {
  /** Whether the samples may show contacts' numbers and texts (the key has CONTACTS); else none. */
  samples: boolean;
}

/**
 * The audience now (a DRAFT: as confirming would snapshot it; later: the snapshot), one message per
 * recipient, and on SMS each recipient's rendered text counted in parts and encodings. Everything is
 * counted by PostgreSQL in one statement (`previewTotals`: the texts rendered in SQL, never walked
 * here); only the few recipients whose SMS parts arithmetic cannot settle (a long text whose two-unit
 * characters may sit at a part's edge) come back, one row per distinct text, to be split as the
 * sender splits them. A recipient whose placeholder values push the text past the channel's maximum
 * is counted in `tooLong` (not in messages, parts or samples): the sender records it FAILED, never
 * cut. The samples are the first few recipients by contact id, rendered here. `exec` runs on one
 * transaction the caller holds (the account's heavy-read slot, with its statement time limit).
 */
export async function preview(exec: Exec, c: CampaignRow, o: PreviewOptions): Promise<PreviewOut> {
  const parsed = parseText(c.text);
  const max = MAX_TEXT[c.channel];
  const sms = c.channel === "SMS";
  const source = previewSource(c, parsed.customKeys);
  const out: PreviewOut = {
    audience: 0,
    messages: 0,
    tooLong: 0,
    excluded: { optedOut: 0 },
    parts: sms ? 0 : null,
    encodings: sms ? { GSM7: 0, UCS2: 0 } : null,
    samples: [],
  };
  if (parsed.pieces.every((p) => typeof p === "string")) {
    // The same text for everyone: counted once.
    const counted = previewAudience(source);
    const [row] = await exec<{ n: number; opted_out: number }>(counted.sql, counted.params);
    out.audience = Number(row?.n ?? 0);
    out.excluded.optedOut = Number(row?.opted_out ?? 0);
    const reached = out.audience - out.excluded.optedOut;
    const text = render(parsed, {}, max);
    if (!fits(text, max)) out.tooLong = reached;
    else if (sms) {
      const info = smsInfo(text);
      out.parts = info.parts * reached;
      out.encodings![info.encoding] = reached;
    }
  } else {
    const totals = previewTotals(source, parsed.pieces, c.channel, max);
    const [t] = await exec<PreviewTotals>(totals.sql, totals.params);
    out.audience = Number(t!.audience);
    out.excluded.optedOut = Number(t!.opted_out);
    out.tooLong = Number(t!.too_long);
    if (sms) {
      out.encodings = { GSM7: Number(t!.gsm7), UCS2: Number(t!.ucs2) };
      out.parts = Number(t!.parts);
      if (Number(t!.unsure) > 0) {
        const unsure = previewUnsure(source, parsed.pieces, max);
        for (const r of await exec<{ t: string; n: number }>(unsure.sql, unsure.params)) out.parts += smsInfo(r.t).parts * Number(r.n);
      }
    }
  }
  out.messages = out.audience - out.excluded.optedOut - out.tooLong;
  if (o.samples && out.messages > 0) {
    const first = previewSamples(source, parsed.pieces, max, SAMPLES);
    for (const r of await exec<{ contact_id: string; destination: string; vars: Record<string, unknown> }>(first.sql, first.params)) {
      const text = render(parsed, r.vars as Vars, max);
      const info = sms ? smsInfo(text) : null;
      out.samples.push({ contactId: r.contact_id, destination: r.destination, text, encoding: info?.encoding ?? null, parts: info?.parts ?? null });
    }
  }
  return out;
}

/**
 * The statistics, asked of the owners at once: the campaign messages by status from tracking
 * (`tracking.campaignStats`), the recipients who wrote back from the inbox (`inbox.campaignResponded`).
 * Each is a heavy read under its own service's slots for the account; a busy one answers 429.
 */
export async function stats(ctx: Context, companyId: string, f: CampaignStatsFilters): Promise<StatsOut> {
  const q: CampaignStatsIn = { companyId };
  if (f.campaignId !== undefined) q.campaignId = f.campaignId;
  if (f.channel !== undefined) q.channel = f.channel;
  if (f.from !== undefined) q.from = f.from;
  if (f.to !== undefined) q.to = f.to;
  const [{ rows }, { responded }] = await Promise.all([callTracking(ctx, "tracking.campaignStats", q), callInbox(ctx, "inbox.campaignResponded", q)]);
  const out: StatsOut = { total: 0, byStatus: {}, read: 0, pending: 0, parts: 0, price: 0, responded };
  for (const r of rows) {
    const n = Number(r.messages);
    const status = statusByCode(Number(r.code));
    out.total += n;
    out.byStatus[status.name] = (out.byStatus[status.name] ?? 0) + n;
    out.read += Number(r.reads);
    if (!status.final) out.pending += n;
    out.parts += Number(r.parts);
    out.price += Number(r.price);
  }
  out.price = Math.round(out.price * 1e6) / 1e6;
  return out;
}
