/**
 * simulator: a believable upstream for UPSTREAM_MODE=simulator (contract section 6), so that
 * `npm start` shows the whole loop. `simulator.send` registers each message through the tracking
 * service's ingest action (the same code path as POST /internal/v1/messages; a repeated
 * customerMessageId is ignored there), splitting long SMS into parts as carriers do; then, after a
 * random delay up to SIMULATOR_MAX_DELAY_MS, it reports receipts with the SIMULATOR_PROFILE's mix of
 * outcomes (prices per SMS part; reads for some RCS/WhatsApp deliveries). It also plays the end
 * users: some recipients of a delivered RCS/WhatsApp message (campaign or inbox reply) write back a
 * little later, through `inbox.ingest` (the code path of POST /internal/v1/inbound/...). Messages with
 * `simulation: true` are registered as such and get no receipt (spec part 6 rule 6).
 *
 * Receipts wait in this process's memory: a simulator that stops loses the ones not yet reported
 * (those messages stay in flight), as a demo may. It belongs in a demo overlay, not in production.
 */
import { randomUUID } from "node:crypto";
import type { Context, Service, ServiceSchema } from "moleculer";
import type { ApiServiceSettings } from "../../lib/http/api";
import type { Channel } from "../../lib/messaging/channels";
import type { Deps } from "../../lib/deps";
import { registrationOf, type OutboundMessage } from "../../lib/http/upstream";
import type { InboxIngestIn } from "../inbox/inbox.contract";
import { simulatorSendIn, type SimulatorSendIn } from "./simulator.contract";
import { DEFAULT_SENDER, drawCode, PROFILES, REPLY_TEXTS, SMS_PART_PRICE } from "./simulator.outcomes";
import { callTracking } from "../tracking/tracking.contract";
import { callInbox } from "../inbox/inbox.contract";

/** Receipts are reported in rounds this far apart, at most INGEST_CHUNK per call. */
const FLUSH_MS = 100;
const INGEST_CHUNK = 1000;

interface Due {
  path: string;
  body: Record<string, unknown>;
}

interface SimulatorVars {
  /** The next round's flush, set only while receipts are due: an idle simulator has no timer. */
  timer: NodeJS.Timeout | null;
  stopped: boolean;
  arm(): void;
  /** Receipts by the FLUSH_MS round they are due in. */
  due: Map<number, Due[]>;
  flushing: boolean;
  schedule(m: OutboundMessage, totalParts: number): void;
  flush(): Promise<void>;
}
type SimulatorThis = Service<ApiServiceSettings> & SimulatorVars;

export function createSimulatorService(deps: Deps): ServiceSchema<ApiServiceSettings, Record<string, never>, SimulatorVars> {
  const { config } = deps;
  const mix = PROFILES[config.simulatorProfile];
  const lower = (c: Channel) => c.toLowerCase();

  return {
    name: "simulator",

    actions: {
      /** Takes a batch as an upstream would: registers every message at tracking (parts counted), then reports receipts after a random delay. */
      send: {
        visibility: "public",
        params: simulatorSendIn,
        async handler(this: SimulatorThis, ctx: Context<SimulatorSendIn>): Promise<{ accepted: number }> {
          const sentAt = new Date().toISOString();
          const registrations = ctx.params.messages.map((m) => registrationOf(m, sentAt));
          await callTracking(ctx, "tracking.ingest", { path: "messages", body: registrations });
          ctx.params.messages.forEach((m, i) => {
            if (!m.simulation) this.schedule(m, registrations[i]!.totalParts);
          });
          return { accepted: registrations.length };
        },
      },
    },

    methods: {
      /** A flush every FLUSH_MS while receipts wait, none when there are none. */
      arm(this: SimulatorThis) {
        if (this.timer || this.stopped || this.due.size === 0) return;
        this.timer = setTimeout(() => {
          this.flush()
            .catch((err: unknown) => this.logger.warn({ err }, "simulator receipts failed"))
            .finally(() => {
              this.timer = null;
              this.arm();
            });
        }, FLUSH_MS);
        this.timer.unref();
      },

      /** The receipts (and maybe a read) of one message, each due after its own random delay. */
      schedule(this: SimulatorThis, m: OutboundMessage, totalParts: number) {
        if (Math.random() < mix.silent) return;
        const at = (extra = 0) => Math.floor((Date.now() + Math.random() * config.simulatorMaxDelayMs + extra) / FLUSH_MS);
        const put = (round: number, d: Due) => {
          const list = this.due.get(round);
          if (list) list.push(d);
          else this.due.set(round, [d]);
          this.arm();
        };
        const code = drawCode(mix, m.channel, Math.random());
        const round = at();
        if (m.channel === "SMS") {
          for (let n = 1; n <= totalParts; n++) {
            const body = {
              companyId: m.companyId,
              MESSAGE_ID: m.customerMessageId,
              DESTINATION: m.destination,
              DELIVERY_STATUS: code,
              DELIVERY_DATE: "",
              PRICE: code === 2 ? 0 : SMS_PART_PRICE,
              TOTAL_PARTS: totalParts,
              NUM_PART: n,
            };
            put(round, { path: "receipts/sms", body });
          }
          return;
        }
        const channel = lower(m.channel);
        put(round, {
          path: `receipts/${channel}`,
          body: { companyId: m.companyId, messageId: m.customerMessageId, destination: m.destination, statusCode: code, eventDate: "" },
        });
        if (code === 3 && Math.random() < mix.reply) {
          // The end user writes back a little after delivery, to the sender the message came from.
          put(Math.max(at(config.simulatorMaxDelayMs / 2), round + 1), {
            path: `inbound/${channel}`,
            body: {
              companyId: m.companyId,
              messageId: `sim-in-${randomUUID()}`,
              source: m.destination,
              destination: m.senderId ?? DEFAULT_SENDER[m.channel],
              receivedDate: "",
              messageType: "TEXT",
              text: REPLY_TEXTS[Math.floor(Math.random() * REPLY_TEXTS.length)]!,
            },
          });
        }
        if (code === 3 && Math.random() < mix.read) {
          // Read a little after delivery: the next round at the earliest.
          put(Math.max(at(config.simulatorMaxDelayMs / 2), round + 1), {
            path: `reads/${channel}`,
            body: { companyId: m.companyId, messageId: m.customerMessageId, destination: m.destination, eventDate: "" },
          });
        }
      },

      /** Reports every receipt now due, grouped by path, in calls of at most INGEST_CHUNK. */
      async flush(this: SimulatorThis) {
        if (this.flushing) return;
        this.flushing = true;
        try {
          const now = Math.floor(Date.now() / FLUSH_MS);
          const byPath = new Map<string, Record<string, unknown>[]>();
          for (const [round, list] of this.due) {
            if (round > now) continue;
            this.due.delete(round);
            const stamp = new Date().toISOString();
            for (const d of list) {
              // Dated when reported, so a read is never dated before its delivery.
              if ("DELIVERY_DATE" in d.body) d.body.DELIVERY_DATE = stamp;
              else if ("receivedDate" in d.body) d.body.receivedDate = stamp;
              else d.body.eventDate = stamp;
              const bucket = byPath.get(d.path);
              if (bucket) bucket.push(d.body);
              else byPath.set(d.path, [d.body]);
            }
          }
          // Deliveries before reads: a read must find its message delivered.
          const paths = [...byPath.keys()].sort((a, b) => Number(a.startsWith("reads/")) - Number(b.startsWith("reads/")));
          for (const path of paths) {
            const bodies = byPath.get(path)!;
            for (let i = 0; i < bodies.length; i += INGEST_CHUNK) {
              const chunk = bodies.slice(i, i + INGEST_CHUNK);
              // End users' messages go to inbox, as the ingress hands them over.
              const call = path.startsWith("inbound/")
                ? callInbox(this.broker, "inbox.ingest", { channel: path.slice("inbound/".length).toUpperCase(), items: chunk } as unknown as InboxIngestIn)
                : callTracking(this.broker, "tracking.ingest", { path, body: chunk });
              await call.catch((err: unknown) => {
                // Without an inbox node the end users' messages have nowhere to go: a demo may run without it.
                if ((err as { name?: string }).name === "ServiceNotFoundError" && path.startsWith("inbound/")) return;
                this.logger.warn({ err, path }, "simulator could not report receipts");
              });
            }
          }
        } finally {
          this.flushing = false;
        }
      },
    },

    created(this: SimulatorThis) {
      this.due = new Map();
      this.flushing = false;
      this.timer = null;
      this.stopped = false;
    },

    started(this: SimulatorThis) {
      this.stopped = false;
      this.arm();
    },

    stopped(this: SimulatorThis) {
      this.stopped = true;
      if (this.timer) clearTimeout(this.timer);
      this.timer = null;
    },
  };
}
