/** The status model as a pure function: receipts and reads folded into a message's state. */
import { fold, placeholder, type MessageState, type ReceiptItem } from "../../services/tracking/tracking.fold";

const base = (over: Partial<MessageState> = {}): MessageState => ({
  id: "1",
  companyId: "co",
  channel: "SMS",
  customerMessageId: "m",
  destination: "+351911111111",
  sentAt: "2026-11-20T10:00:00.000Z",
  totalParts: 1,
  simulation: false,
  statusCode: 1,
  deliveryDate: null,
  readAt: null,
  price: null,
  partCodes: null,
  lastPartDate: null,
  changed: false,
  ...over,
});
const receipt = (over: Partial<ReceiptItem> = {}): ReceiptItem => ({
  kind: "receipt",
  channel: "SMS",
  companyId: "co",
  messageId: "m",
  destination: "+351911111111",
  code: 3,
  date: "2026-11-20T10:00:05.000Z",
  totalParts: null,
  numPart: 1,
  ...over,
});

it("makes an in-flight SMS final with one event, and a repeat or a later code changes nothing", () => {
  const s = base();
  expect(fold(s, receipt({ code: 2, price: 0.05 }))).toMatchObject({
    event_type: "DELIVERY",
    num_part: 1,
    payload: { statusCode: 2, description: "rejected", price: 0.05, totalParts: 1, numPart: 1 },
  });
  expect(s).toMatchObject({ statusCode: 2, deliveryDate: "2026-11-20T10:00:05.000Z", price: 0.05, changed: true });
  expect(fold(s, receipt({ code: 2 }))).toBeNull();
  expect(fold(s, receipt({ code: 3 }))).toBeNull();
  expect(s.statusCode).toBe(2);
});

it("folds parts in any order: final with the lowest-numbered failure and the latest date, one event per part", () => {
  const s = base({ totalParts: 3 });
  const events = [
    fold(s, receipt({ numPart: 3, code: 3, date: "2026-11-20T10:00:09.000Z", price: 0.01 })),
    fold(s, receipt({ numPart: 2, code: 6, date: "2026-11-20T10:00:07.000Z", price: 0.01 })),
    fold(s, receipt({ numPart: 2, code: 3 })), // repeat of part 2
  ];
  expect(s.statusCode).toBe(1);
  events.push(fold(s, receipt({ numPart: 1, code: 4, date: "2026-11-20T10:00:08.000Z" })));
  expect(events.map((e) => e?.num_part ?? null)).toEqual([3, 2, null, 1]);
  expect(s).toMatchObject({ statusCode: 4, deliveryDate: "2026-11-20T10:00:09.000Z", price: 0.02, partCodes: [4, 6, 3] });
});

it("keeps DELIVERED on a read, records readAt once, and makes nothing of a simulated message", () => {
  const s = base({ channel: "RCS", statusCode: 3 });
  const read = {
    kind: "read" as const,
    channel: "RCS" as const,
    companyId: "co",
    messageId: "m",
    destination: "+351911111111",
    date: "2026-11-20T11:00:00.000Z",
  };
  expect(fold(s, read)?.payload).toEqual({
    eventType: "READ",
    channel: "RCS",
    messageId: "m",
    destination: "+351911111111",
    eventDate: "2026-11-20T11:00:00.000Z",
  });
  expect(fold(s, { ...read, date: "2026-11-20T12:00:00.000Z" })).toBeNull();
  expect(s).toMatchObject({ statusCode: 3, readAt: "2026-11-20T11:00:00.000Z" });
  const sim = base({ simulation: true });
  expect(fold(sim, receipt())).toBeNull();
  expect(sim.statusCode).toBe(3);
});

it("starts a message first heard of by a receipt in flight, with the carrier's part count", () => {
  const p = placeholder(receipt({ totalParts: 2, numPart: 2 }));
  expect(p).toMatchObject({ id: null, sentAt: null, statusCode: 1, totalParts: 2 });
  expect(placeholder({ ...receipt(), channel: "WHATSAPP" }).statusCode).toBe(0);
});
