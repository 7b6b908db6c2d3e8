/**
 * The simulator's mix of outcomes per SIMULATOR_PROFILE: the final codes each channel's receipts
 * carry (with their weights), how many RCS/WhatsApp deliveries are read, and how many messages
 * never get a receipt at all (flaky). Prices per SMS part.
 */
import type { Channel } from "../../lib/messaging/channels";

export type Profile = "realistic" | "all-delivered" | "flaky";

interface Mix {
  codes: Record<Channel, Array<[code: number, weight: number]>>;
  /** Share of delivered RCS/WhatsApp messages that are read. */
  read: number;
  /** Share of messages that never get a receipt. */
  silent: number;
  /** Share of delivered RCS/WhatsApp messages whose end user writes back (through inbox.ingest). */
  reply: number;
}

export const PROFILES: Record<Profile, Mix> = {
  "all-delivered": { codes: { SMS: [[3, 1]], RCS: [[3, 1]], WHATSAPP: [[3, 1]] }, read: 0.5, silent: 0, reply: 0.5 },
  realistic: {
    codes: {
      SMS: [
        [3, 0.92],
        [6, 0.03],
        [4, 0.02],
        [2, 0.02],
        [5, 0.01],
      ],
      RCS: [
        [3, 0.85],
        [11, 0.08],
        [9, 0.04],
        [4, 0.03],
      ],
      WHATSAPP: [
        [3, 0.88],
        [11, 0.05],
        [10, 0.03],
        [9, 0.02],
        [4, 0.02],
      ],
    },
    read: 0.4,
    silent: 0,
    reply: 0.15,
  },
  flaky: {
    codes: {
      SMS: [
        [3, 0.6],
        [6, 0.15],
        [4, 0.15],
        [2, 0.1],
      ],
      RCS: [
        [3, 0.5],
        [11, 0.2],
        [9, 0.2],
        [10, 0.1],
      ],
      WHATSAPP: [
        [3, 0.5],
        [11, 0.15],
        [10, 0.15],
        [9, 0.1],
        [12, 0.1],
      ],
    },
    read: 0.2,
    silent: 0.1,
    reply: 0.1,
  },
};

/** Price of one SMS part; a part the carrier rejected costs nothing. */
export const SMS_PART_PRICE = 0.0075;

/** A code drawn from the channel's weights (`r` in [0, 1)). */
export function drawCode(mix: Mix, channel: Channel, r: number): number {
  const table = mix.codes[channel];
  let acc = 0;
  for (const [code, weight] of table) {
    acc += weight;
    if (r < acc) return code;
  }
  return table[0]![0];
}

/** The sender an end user writes to when the message named none (a campaign): per channel. */
export const DEFAULT_SENDER = { RCS: "simulator-agent", WHATSAPP: "+351210000000" } as const;

/** What simulated end users write back. */
export const REPLY_TEXTS = ["Thanks!", "Yes, please", "Can you tell me more?", "STOP", "When does it start?", "👍"];
