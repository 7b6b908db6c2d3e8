/**
 * The dry run (GET /campaigns/{id}/preview) and the statistics (GET /campaigns/stats): both read,
 * neither stores nor sends anything.
 */
import type { Sequelize } from "sequelize";
import { statusByCode } from "../../lib/channels";
import { rawQuery, rawTransaction } from "../../lib/db";
import { smsInfo } from "../../lib/sms";
import { campaignRespondedSql } from "../inbox/inbox.contract";
import { campaignStatsSql, type CampaignStatsFilters } from "../tracking/tracking.contract";
import type { CampaignRow } from "./campaigns.models";
import { audienceCount, audiencePage, audienceQuery, q, recipientsPage } from "./campaigns.queries";
import type { PreviewOut, StatsOut } from "./campaigns.schemas";
import { fits, MAX_TEXT, parseText, render, type Vars } from "./campaigns.text";

const PAGE = 5000;
const SAMPLES = 5;

/**
 * The audience now (a DRAFT: as confirming would snapshot it; later: the snapshot), one message per
 * recipient, and on SMS each recipient's rendered text counted in parts and encodings. A text with
 * no placeholder is the same for everyone: counted once. Read in pages by contact id. A recipient
 * whose placeholder values push the text past the channel's maximum is counted in `tooLong` (not in
 * messages, parts or samples): the sender records it FAILED, never cut. A DRAFT's audience is read
 * once, through a cursor: a keyset page of the audience query would evaluate the lists' join again
 * for every page (quadratic in the audience: minutes at 1,000,000 contacts).
 */
export async function preview(sequelize: Sequelize, c: CampaignRow): Promise<PreviewOut> {
  const exec = q(sequelize);
  const parsed = parseText(c.text);
  const max = MAX_TEXT[c.channel];
  const sms = c.channel === "SMS";
  const same = parsed.pieces.every((p) => typeof p === "string");
  const page = (after: string | null, limit: number) =>
    c.status === "DRAFT" ? audiencePage(exec, c, parsed.customKeys, after, limit) : recipientsPage(exec, c.id, after, limit);
  const out: PreviewOut = { audience: 0, messages: 0, tooLong: 0, parts: sms ? 0 : null, encodings: sms ? { GSM7: 0, UCS2: 0 } : null, samples: [] };
  const take = (r: { contact_id: string; destination: string; vars: Record<string, unknown> }) => {
    const text = render(parsed, r.vars as Vars, max);
    if (!fits(text, max)) {
      out.tooLong++;
      return null;
    }
    const info = sms ? smsInfo(text) : null;
    if (out.samples.length < SAMPLES)
      out.samples.push({ contactId: r.contact_id, destination: r.destination, text, encoding: info?.encoding ?? null, parts: info?.parts ?? null });
    return info;
  };
  if (same) {
    const first = await page(null, SAMPLES);
    first.forEach(take);
    out.audience = c.status === "DRAFT" ? (first.length < SAMPLES ? first.length : await audienceCount(exec, c)) : Number(c.audience);
    const info = sms ? smsInfo(render(parsed, {}, max)) : null;
    if (info) {
      out.parts = info.parts * out.audience;
      out.encodings![info.encoding] = out.audience;
    }
  } else {
    const count = (r: { contact_id: string; destination: string; vars: Record<string, unknown> }) => {
      const info = take(r);
      out.audience++;
      if (info) {
        out.parts! += info.parts;
        out.encodings![info.encoding]++;
      }
    };
    if (c.status === "DRAFT") {
      const { sql, params } = audienceQuery(c, parsed.customKeys);
      await rawTransaction(sequelize, async (tx) => {
        await tx(`DECLARE preview_audience NO SCROLL CURSOR FOR ${sql}`, params);
        for (;;) {
          const rows = await tx<{ contact_id: string; destination: string; vars: Record<string, unknown> }>(`FETCH ${PAGE} FROM preview_audience`);
          rows.forEach(count);
          if (rows.length < PAGE) break;
        }
      });
    } else {
      for (let after: string | null = null; ;) {
        const rows = await recipientsPage(exec, c.id, after, PAGE);
        rows.forEach(count);
        if (rows.length < PAGE) break;
        after = rows[rows.length - 1]!.contact_id;
      }
    }
  }
  out.messages = out.audience - out.tooLong;
  return out;
}

/**
 * The statistics: one indexed query over the campaign messages (tracking's campaignStatsSql), and
 * one for the recipients who wrote back (inbox's campaignRespondedSql), side by side.
 */
export async function stats(sequelize: Sequelize, companyId: string, f: CampaignStatsFilters): Promise<StatsOut> {
  const { sql, params } = campaignStatsSql(companyId, f);
  const responded = campaignRespondedSql(companyId, f);
  const [rows, [answered]] = await Promise.all([
    rawQuery<{ code: number; messages: string; reads: string; parts: string; price: number }>(sequelize, sql, params),
    rawQuery<{ responded: string }>(sequelize, responded.sql, responded.params),
  ]);
  const out: StatsOut = { total: 0, byStatus: {}, read: 0, pending: 0, parts: 0, price: 0, responded: Number(answered?.responded ?? 0) };
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
