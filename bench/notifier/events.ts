/** The bench's messages, receipts and the event body a receipt becomes (the same bytes for the floor). */
export const phone = (i: number) => `+4930${String(i).padStart(8, "0")}`;
export const registration = (co: string, prefix: string, i: number) => ({
  companyId: co,
  channel: "SMS",
  customerMessageId: `${prefix}-${i}`,
  destination: phone(i),
  sentAt: new Date().toISOString(),
});
export const receipt = (co: string, prefix: string, i: number) => ({
  companyId: co,
  MESSAGE_ID: `${prefix}-${i}`,
  DESTINATION: phone(i),
  DELIVERY_STATUS: 3,
  DELIVERY_DATE: "2026-11-20T10:00:05.000Z",
  PRICE: 0.04,
});
/** What the notifier posts for `receipt(…, "m", i)` (jsonb's text form). */
export const eventBody = (i: number) =>
  `{"price": 0.04, "channel": "SMS", "numPart": 1, "eventDate": "2026-11-20T10:00:05.000Z", "eventType": "DELIVERY", "messageId": "m-${i}", "statusCode": 3, "totalParts": 1, "description": "delivered", "destination": "${phone(i)}"}`;
