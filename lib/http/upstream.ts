/**
 * The upstream adapter (contract section 6): the one way outbound messages (campaign sends, later
 * inbox replies) leave the product. Two implementations behind one interface, picked by
 * UPSTREAM_MODE: `simulator` hands batches to the simulator service (a Moleculer call), `http`
 * posts each message to the channel's UPSTREAM_*_URL with an `Idempotency-Key` (its
 * customerMessageId), bounded connect and answer time-outs and a bounded number in flight.
 * Neither retries by itself: a failed message is reported back, and the caller's durable rows
 * decide when it is tried again (campaigns: backoff, FAILED after 3 attempts).
 */
import { Agent, request } from "undici";
import type { Channel } from "../messaging/channels";
import type { Config } from "../config";
import { splitSms } from "../messaging/sms";

export interface OutboundMessage {
  companyId: string;
  channel: Channel;
  customerMessageId: string;
  destination: string;
  text: string;
  mediaIds?: string[];
  campaignId?: string;
  /** The sender to send from (an inbox reply answers from its conversation's WhatsApp number or RCS agent id); the account's default when absent. */
  senderId?: string;
  /** Validated, never sent, no callback (spec part 6 rule 6). */
  simulation?: boolean;
}

export interface SendOutcome {
  /**
   * No node serves the adapter right now (UPSTREAM_MODE=simulator: the simulator service is not
   * registered yet, or any more). Nothing was handed over. That is about this cluster, not the
   * upstream's verdict on the messages: the caller gives the batch back, counting no attempt.
   */
  unavailable?: boolean;
  /** The messages the upstream did not take, with why; every other message of the batch was taken. */
  failed: Array<{
    customerMessageId: string;
    error: string;
    /** Permanent (a 4xx other than 408 and 429): not tried again. */
    final?: boolean;
    /** The upstream asked to wait this long before trying again (429 Retry-After, at most RETRY_AFTER_MAX_MS). */
    retryAfterMs?: number;
  }>;
}

export interface Upstream {
  readonly mode: "simulator" | "http";
  send(messages: OutboundMessage[]): Promise<SendOutcome>;
  close(): Promise<void>;
}

/**
 * How a message is registered at tracking (`POST /internal/v1/messages`, `tracking.ingest`): its
 * parts counted (SMS), and `simulation: true` for a test-list message.
 */
export function registrationOf(m: OutboundMessage, sentAt: string) {
  const parts = m.channel === "SMS" ? splitSms(m.text).length : 1;
  return {
    companyId: m.companyId,
    channel: m.channel,
    customerMessageId: m.customerMessageId,
    destination: m.destination,
    sentAt,
    totalParts: Math.min(parts, 255),
    text: m.text,
    ...(m.campaignId ? { campaignId: m.campaignId } : {}),
    ...(m.simulation ? { simulation: true } : {}),
  };
}

/** The longest 429 Retry-After honoured; a longer one waits this long. */
export const RETRY_AFTER_MAX_MS = 300_000;

/** A Retry-After header (delay-seconds or an HTTP date) in milliseconds, bounded; undefined when absent or unreadable. */
export function retryAfterMs(header: string | string[] | undefined, now = Date.now()): number | undefined {
  const v = (Array.isArray(header) ? header[0] : header)?.trim();
  if (!v) return undefined;
  const ms = /^\d+$/.test(v) ? Number(v) * 1000 : Date.parse(v) - now;
  return Number.isNaN(ms) ? undefined : Math.min(Math.max(ms, 0), RETRY_AFTER_MAX_MS);
}

/** A failure of the whole batch: every message failed with the same reason. */
const allFailed = (messages: OutboundMessage[], error: string): SendOutcome => ({
  failed: messages.map((m) => ({ customerMessageId: m.customerMessageId, error })),
});

const reason = (err: unknown) => {
  const e = err as { code?: unknown; type?: unknown; message?: unknown } | null;
  return String(e?.type ?? e?.code ?? e?.message ?? "upstream failure").slice(0, 200);
};

/** Moleculer's errors for an action no node serves (none registered, or none available). */
const NO_NODE = new Set(["ServiceNotFoundError", "ServiceNotAvailableError"]);

/** UPSTREAM_MODE=simulator: `call` reaches the simulator service's `simulator.send`. */
export class SimulatorUpstream implements Upstream {
  readonly mode = "simulator" as const;
  constructor(private readonly call: (messages: OutboundMessage[]) => Promise<unknown>) {}

  async send(messages: OutboundMessage[]): Promise<SendOutcome> {
    try {
      await this.call(messages);
      return { failed: [] };
    } catch (err) {
      const outcome = allFailed(messages, `simulator: ${reason(err)}`);
      return NO_NODE.has((err as { name?: string } | null)?.name ?? "") ? { ...outcome, unavailable: true } : outcome;
    }
  }

  async close(): Promise<void> {}
}

/**
 * UPSTREAM_MODE=http: one POST per message to its channel's URL. A test-list message
 * (`simulation: true`, spec part 6 rule 6: validated, never sent, no callback) never reaches the
 * HTTP upstream: `registerSimulated` registers it at tracking with `simulation: true` (as the
 * simulator does), and it counts as taken.
 */
export class HttpUpstream implements Upstream {
  readonly mode = "http" as const;
  private readonly agent: Agent;
  private readonly urls: Record<Channel, string | null>;

  constructor(
    private readonly config: Pick<
      Config,
      "upstreamSmsUrl" | "upstreamRcsUrl" | "upstreamWhatsappUrl" | "upstreamConnectTimeoutMs" | "upstreamTimeoutMs" | "upstreamConcurrency"
    >,
    private readonly registerSimulated: (registrations: Array<ReturnType<typeof registrationOf>>) => Promise<unknown>,
  ) {
    this.agent = new Agent({
      connect: { timeout: config.upstreamConnectTimeoutMs },
      headersTimeout: config.upstreamTimeoutMs,
      bodyTimeout: config.upstreamTimeoutMs,
      connections: config.upstreamConcurrency,
    });
    this.urls = { SMS: config.upstreamSmsUrl, RCS: config.upstreamRcsUrl, WHATSAPP: config.upstreamWhatsappUrl };
  }

  async send(all: OutboundMessage[]): Promise<SendOutcome> {
    const failed: SendOutcome["failed"] = [];
    const simulated = all.filter((m) => m.simulation);
    const messages = all.filter((m) => !m.simulation);
    if (simulated.length) {
      const sentAt = new Date().toISOString();
      try {
        await this.registerSimulated(simulated.map((m) => registrationOf(m, sentAt)));
      } catch (err) {
        failed.push(...allFailed(simulated, `tracking: ${reason(err)}`).failed);
      }
    }
    let next = 0;
    const worker = async () => {
      while (next < messages.length) {
        const m = messages[next++]!;
        const f = await this.post(m);
        if (f) failed.push({ customerMessageId: m.customerMessageId, ...f });
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.config.upstreamConcurrency, messages.length) }, worker));
    return { failed };
  }

  /**
   * Null when the upstream took the message (any 2xx), else why not: a 4xx other than 408 and 429
   * is permanent (the message is wrong, trying again changes nothing); a 429 says how long to wait.
   */
  private async post(m: OutboundMessage): Promise<Omit<SendOutcome["failed"][number], "customerMessageId"> | null> {
    const url = this.urls[m.channel];
    if (!url) return { error: `no upstream URL for ${m.channel}` };
    try {
      const res = await request(url, {
        method: "POST",
        dispatcher: this.agent,
        headers: { "content-type": "application/json", "idempotency-key": m.customerMessageId, "user-agent": "partner-gateway-upstream/1.0" },
        body: JSON.stringify(m),
        signal: AbortSignal.timeout(this.config.upstreamTimeoutMs + this.config.upstreamConnectTimeoutMs),
      });
      await res.body.dump();
      const code = res.statusCode;
      if (code >= 200 && code < 300) return null;
      const error = `HTTP ${code}`;
      if (code === 429) {
        const wait = retryAfterMs(res.headers["retry-after"]);
        return wait === undefined ? { error } : { error, retryAfterMs: wait };
      }
      return code >= 400 && code < 500 && code !== 408 ? { error, final: true } : { error };
    } catch (err) {
      return { error: reason(err) };
    }
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}

/** The adapter UPSTREAM_MODE names. */
export function createUpstream(
  config: Config,
  callSimulator: (messages: OutboundMessage[]) => Promise<unknown>,
  registerSimulated: (registrations: Array<ReturnType<typeof registrationOf>>) => Promise<unknown>,
): Upstream {
  return config.upstreamMode === "http" ? new HttpUpstream(config, registerSimulated) : new SimulatorUpstream(callSimulator);
}
