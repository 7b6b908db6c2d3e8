/**
 * Channels and the delivery statuses table of spec part 2, once: codes, names, descriptions, which
 * channels may report each code and whether it is final. Tracking, contacts, the notifier and the
 * documentation all read it from here.
 */
export const CHANNELS = ["SMS", "RCS", "WHATSAPP"] as const;
export type Channel = (typeof CHANNELS)[number];

export const DELIVERY_STATUSES = [
  { code: 1, name: "ACCEPTED", description: "accepted", channels: ["SMS"], final: false },
  { code: 2, name: "REJECTED", description: "rejected", channels: ["SMS"], final: true },
  { code: 3, name: "DELIVERED", description: "delivered", channels: ["SMS", "RCS", "WHATSAPP"], final: true },
  { code: 4, name: "EXPIRED", description: "expired", channels: ["SMS", "RCS", "WHATSAPP"], final: true },
  { code: 5, name: "DELETED", description: "deleted", channels: ["SMS"], final: true },
  { code: 6, name: "UNDELIVERABLE", description: "undeliverable", channels: ["SMS"], final: true },
  { code: 9, name: "ERROR", description: "general error", channels: ["RCS", "WHATSAPP"], final: true },
  { code: 10, name: "DISABLED", description: "disabled", channels: ["RCS", "WHATSAPP"], final: true },
  { code: 11, name: "UNSUPPORTED", description: "unsupported", channels: ["RCS", "WHATSAPP"], final: true },
  { code: 12, name: "CONVERSATION_CLOSED", description: "conversation closed", channels: ["WHATSAPP"], final: true },
  { code: 0, name: "UNKNOWN", description: "unknown", channels: ["SMS", "RCS", "WHATSAPP"], final: false },
] as const satisfies ReadonlyArray<{ code: number; name: string; description: string; channels: readonly Channel[]; final: boolean }>;

export type DeliveryStatusName = (typeof DELIVERY_STATUSES)[number]["name"];
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

export const STATUS_NAMES = DELIVERY_STATUSES.map((s) => s.name) as DeliveryStatusName[];
const BY_CODE = new Map<number, DeliveryStatus>(DELIVERY_STATUSES.map((s) => [s.code, s]));
const BY_NAME = new Map<string, DeliveryStatus>(DELIVERY_STATUSES.map((s) => [s.name, s]));

export const statusByCode = (code: number): DeliveryStatus => BY_CODE.get(code) ?? BY_CODE.get(0)!;
export const statusByName = (name: string): DeliveryStatus | undefined => BY_NAME.get(name);

/** The status a message reads while no receipt has arrived: ACCEPTED on SMS, UNKNOWN elsewhere. */
export const inFlightCode = (channel: Channel): number => (channel === "SMS" ? 1 : 0);

/** The final codes a receipt on `channel` may carry (spec part 6 rule 5: never 0 or 1). */
export const finalCodesOf = (channel: Channel): number[] =>
  DELIVERY_STATUSES.filter((s) => s.final && (s.channels as readonly Channel[]).includes(channel)).map((s) => s.code);

export const DELIVERED = 3;
