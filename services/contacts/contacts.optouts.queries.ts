/**
 * Opt-outs (contract section 7; table `opt_outs`, migrations/20261128-0019): the rule that orders
 * changes, and its SQL. A number's row keeps its state (`opted_out`) and the time of its last change
 * (`changed_at`); a change said before that time is ignored, so a late or repeated report (an
 * upstream retrying, a keyword message delivered twice) never undoes a newer change, and an opt-out
 * wins a tie. Rows stay after an opt-in (opted_out false) for that reason.
 *
 * Every writer (the partner API, keywords and upstream reports through `contacts.applyOptOuts`,
 * imports) goes through {@link applyChanges}: the rows of the changes' numbers are taken FOR UPDATE
 * (a row for a number new to the table first inserted as a placeholder, so two writers of a new
 * number meet on its key), the changes are folded in order of their time, and the rows that changed
 * are written back in one statement.
 */
import { QueryTypes, type Sequelize, type Transaction } from "sequelize";
import { CHANNELS, type Channel } from "../../lib/messaging/channels";
import { jsonParam } from "../../lib/db/db";
import { queryPage, type Page } from "../../lib/http/paging";
import type { OptOutAction, OptOutSource } from "./contacts.contract";
import type { ListOptOutsIn, OptOutOut } from "./contacts.optouts.schemas";

/** A number's consent on one channel of one account, times in ms. */
export interface OptOutState {
  optedOut: boolean;
  source: OptOutSource;
  /** When the current opt-out began. */
  createdAt: number;
  changedAt: number;
}

/** A change as {@link foldChange} takes it. */
export interface Change {
  companyId: string;
  channel: Channel;
  phoneNumber: string;
  action: OptOutAction;
  source: OptOutSource;
  /** When it was said (ms), or null: now, after whatever came before. */
  at: number | null;
  /** An opt-in that removes only an opt-out of this source (an import's `false` never undoes an end user's STOP). */
  onlyIfSource?: OptOutSource;
}

/**
 * One change applied to a number's state (undefined: no row). `now` bounds `at` (a report dated in
 * the future counts as now). Answers the state after it and whether the opt-out was turned on or off.
 */
export function foldChange(state: OptOutState | undefined, c: Change, now: number): { state: OptOutState | undefined; changed: boolean } {
  const same = { state, changed: false };
  if (c.onlyIfSource && !(state?.optedOut && state.source === c.onlyIfSource)) return same;
  if (c.at !== null && state) {
    const at = Math.min(c.at, now);
    // Older than the last change: ignored (an opt-out said at the same instant still counts).
    if (c.action === "OPT_OUT" ? at < state.changedAt : at <= state.changedAt) return same;
  }
  const at = c.at === null ? Math.max(now, state?.changedAt ?? now) : Math.min(c.at, now);
  if (c.action === "OPT_OUT") {
    if (state?.optedOut) return { state: { ...state, changedAt: Math.max(state.changedAt, at) }, changed: false };
    return { state: { optedOut: true, source: c.source, createdAt: at, changedAt: at }, changed: true };
  }
  if (state?.optedOut) return { state: { ...state, optedOut: false, source: c.source, changedAt: at }, changed: true };
  if (state) return { state: { ...state, changedAt: Math.max(state.changedAt, at) }, changed: false };
  // Never opted out: an opt-in told with its time is kept, so that an older opt-out reported late stays ignored.
  return c.at === null ? same : { state: { optedOut: false, source: c.source, createdAt: at, changedAt: at }, changed: false };
}

/**
 * Order of a number's changes (a stable sort): by time (those without one last, as now), an opt-in
 * before an opt-out said at the same instant; changes without a time (an import's rows) in the order
 * given, so a later row of a file wins over an earlier one.
 */
function byTime(a: Change, b: Change): number {
  if (a.at === null && b.at === null) return 0;
  const ta = a.at ?? Infinity;
  const tb = b.at ?? Infinity;
  if (ta !== tb) return ta < tb ? -1 : 1;
  return (a.action === "OPT_OUT" ? 1 : 0) - (b.action === "OPT_OUT" ? 1 : 0);
}

const keyOf = (c: { companyId: string; channel: string; phoneNumber: string }) => `${c.companyId}\u0000${c.channel}\u0000${c.phoneNumber}`;

interface Row {
  company_id: string;
  channel: Channel;
  phone_number: string;
  opted_out: boolean;
  source: OptOutSource;
  created_at: Date;
  changed_at: Date;
  placeholder: boolean;
}

const KEYS = `jsonb_to_recordset($1::jsonb) AS k(company_id text, channel text, phone_number text)`;
const keyRows = (list: Array<{ companyId: string; channel: string; phoneNumber: string }>) =>
  jsonParam(() => list.map((k) => ({ company_id: k.companyId, channel: k.channel, phone_number: k.phoneNumber })));

/**
 * Applies changes inside `transaction`, in order of their time per number; answers, per change in
 * the order given, whether it turned an opt-out on or off and the number's state after all of them.
 */
export async function applyChanges(
  sequelize: Sequelize,
  transaction: Transaction,
  changes: Change[],
): Promise<Array<{ changed: boolean; state: OptOutState | undefined }>> {
  if (changes.length === 0) return [];
  const keys = new Map<string, Change>();
  const creating = new Map<string, Change>();
  for (const c of changes) {
    keys.set(keyOf(c), c);
    // Only an opt-out, or an opt-in with its time, may leave a row for a number the table does not hold.
    if (c.action === "OPT_OUT" || c.at !== null) creating.set(keyOf(c), c);
  }
  if (creating.size > 0) {
    await sequelize.query(
      `INSERT INTO opt_outs (company_id, channel, phone_number, opted_out, source, created_at, changed_at)
       SELECT k.company_id, k.channel, k.phone_number, false, 'API', '-infinity', '-infinity' FROM ${KEYS}
        ORDER BY k.company_id, k.channel, k.phone_number
       ON CONFLICT DO NOTHING`,
      { bind: [keyRows([...creating.values()])], transaction },
    );
  }
  const rows = await sequelize.query<Row>(
    `SELECT o.company_id, o.channel, o.phone_number, o.opted_out, o.source, o.created_at, o.changed_at, o.changed_at = '-infinity' AS placeholder
       FROM opt_outs o
      WHERE (o.company_id, o.channel, o.phone_number) IN (SELECT k.company_id, k.channel, k.phone_number FROM ${KEYS})
      ORDER BY o.company_id, o.channel, o.phone_number
        FOR UPDATE`,
    { bind: [keyRows([...keys.values()])], type: QueryTypes.SELECT, transaction },
  );
  const states = new Map<string, OptOutState | undefined>();
  const before = new Map<string, OptOutState | undefined>();
  for (const r of rows) {
    const s = r.placeholder
      ? undefined
      : { optedOut: r.opted_out, source: r.source, createdAt: new Date(r.created_at).getTime(), changedAt: new Date(r.changed_at).getTime() };
    const k = keyOf({ companyId: r.company_id, channel: r.channel, phoneNumber: r.phone_number });
    states.set(k, s);
    before.set(k, s);
  }

  const now = Date.now();
  const outcome = new Map<Change, boolean>();
  const order = changes.map((c, i) => ({ c, i })).sort((x, y) => byTime(x.c, y.c) || x.i - y.i);
  for (const { c } of order) {
    const k = keyOf(c);
    const out = foldChange(states.get(k), c, now);
    states.set(k, out.state);
    outcome.set(c, out.changed);
  }

  const written: Array<Record<string, unknown>> = [];
  for (const [k, s] of states) {
    const b = before.get(k);
    if (!s || (b && b.optedOut === s.optedOut && b.source === s.source && b.createdAt === s.createdAt && b.changedAt === s.changedAt)) continue;
    const c = keys.get(k)!;
    const iso = (ms: number) => new Date(ms).toISOString();
    written.push({
      company_id: c.companyId,
      channel: c.channel,
      phone_number: c.phoneNumber,
      opted_out: s.optedOut,
      source: s.source,
      created_at: iso(s.createdAt),
      changed_at: iso(s.changedAt),
    });
  }
  if (written.length > 0) {
    await sequelize.query(
      `INSERT INTO opt_outs (company_id, channel, phone_number, opted_out, source, created_at, changed_at)
       SELECT u.company_id, u.channel, u.phone_number, u.opted_out, u.source, u.created_at, u.changed_at
         FROM jsonb_to_recordset($1::jsonb) AS u(company_id text, channel text, phone_number text, opted_out boolean, source text, created_at timestamptz, changed_at timestamptz)
       ON CONFLICT (company_id, channel, phone_number) DO UPDATE
         SET opted_out = EXCLUDED.opted_out, source = EXCLUDED.source, created_at = EXCLUDED.created_at, changed_at = EXCLUDED.changed_at`,
      { bind: [jsonParam(() => written)], transaction },
    );
  }
  // A placeholder no change turned into a state (none should be left) goes again.
  const left = [...states].filter(([k, s]) => s === undefined && creating.has(k)).map(([k]) => keys.get(k)!);
  if (left.length > 0) {
    await sequelize.query(
      `DELETE FROM opt_outs o USING ${KEYS}
        WHERE o.company_id = k.company_id AND o.channel = k.channel AND o.phone_number = k.phone_number AND o.changed_at = '-infinity'`,
      { bind: [keyRows(left)], transaction },
    );
  }
  return changes.map((c) => ({ changed: outcome.get(c) ?? false, state: states.get(keyOf(c)) }));
}

interface OptOutRow {
  channel: Channel;
  phone_number: string;
  source: OptOutSource;
  created_at: Date;
}

export const toOptOutOut = (r: OptOutRow): OptOutOut => ({
  channel: r.channel,
  phoneNumber: r.phone_number,
  source: r.source,
  createdAt: new Date(r.created_at).toISOString(),
});

/** A page of the account's active opt-outs, newest first (ties by channel and number), by channel and number when given (`phoneNumber` in E.164). */
export function optOutsPage(sequelize: Sequelize, companyId: string, p: ListOptOutsIn & { phoneNumber?: string }): Promise<Page<OptOutOut>> {
  const where = ["o.company_id = :companyId", "o.opted_out"];
  if (p.channel !== undefined) where.push("o.channel = :channel");
  if (p.phoneNumber !== undefined) where.push("o.phone_number = :phoneNumber");
  // The partial index opt_outs_newest in its own order (newest first), or backwards.
  const order = p.sortOrder === "asc" ? "o.created_at ASC, o.channel DESC, o.phone_number DESC" : "o.created_at DESC, o.channel ASC, o.phone_number ASC";
  return queryPage(sequelize, {
    select: `SELECT o.channel, o.phone_number, o.source, o.created_at FROM opt_outs o WHERE ${where.join(" AND ")} ORDER BY ${order} LIMIT :limit OFFSET :offset`,
    count: `SELECT count(*) AS total FROM opt_outs o WHERE ${where.join(" AND ")}`,
    replacements: { companyId, channel: p.channel ?? null, phoneNumber: p.phoneNumber ?? null },
    page: p.page,
    limit: p.limit,
    map: toOptOutOut,
  });
}

/**
 * An import's `optedOut` cells as changes (source IMPORT, now): each number is opted out of the
 * channels its row lists; on the others an opt-out an import made is removed, while one the end
 * user (KEYWORD), the upstream or the API made stays until START, an upstream opt-in or DELETE.
 */
export function importedOptOuts(companyId: string, rows: Array<{ phone: string; channels: readonly Channel[] }>): Change[] {
  return rows.flatMap(({ phone, channels }) =>
    CHANNELS.map((channel): Change =>
      channels.includes(channel)
        ? { companyId, channel, phoneNumber: phone, action: "OPT_OUT", source: "IMPORT", at: null }
        : { companyId, channel, phoneNumber: phone, action: "OPT_IN", source: "IMPORT", at: null, onlyIfSource: "IMPORT" },
    ),
  );
}
