/**
 * The signature form of signed webhooks (services/notifier/notifier.signing.ts), checked against
 * the `standardwebhooks` library as a partner's receiver runs it: our headers verify with the
 * secret (either of two during a rotation), not with another, not for another body or id; the
 * webhook-id depends on the event's identity and account only.
 */
import { Webhook, WebhookVerificationError } from "standardwebhooks";
import { newSigningSecret, signatureHeaders, webhookId } from "../../services/notifier/notifier.signing";

const keyOf = (secret: string) => Buffer.from(secret.slice("whsec_".length), "base64");
const BODY = '{"eventType":"DELIVERY","channel":"SMS","messageId":"m-1","statusCode":3}';

describe("signed webhooks", () => {
  it("makes secrets of the form whsec_ + 32 random bytes in base64", () => {
    const a = newSigningSecret();
    expect(a).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(keyOf(a)).toHaveLength(32);
    expect(newSigningSecret()).not.toBe(a);
  });

  it("signs what standardwebhooks verifies, with one secret or two", () => {
    const [current, previous, other] = [newSigningSecret(), newSigningSecret(), newSigningSecret()];
    const id = webhookId("acme", '["SMS","DELIVERY","m-1",1]');
    const one = signatureHeaders({ id, keys: [keyOf(current)] }, BODY);
    expect(new Webhook(current).verify(BODY, one)).toEqual(JSON.parse(BODY));
    expect(() => new Webhook(previous).verify(BODY, one)).toThrow(WebhookVerificationError);
    expect(() => new Webhook(current).verify(BODY.replace("m-1", "m-2"), one)).toThrow(WebhookVerificationError);
    expect(() => new Webhook(current).verify(BODY, { ...one, "webhook-id": `${id}x` })).toThrow(WebhookVerificationError);

    const both = signatureHeaders({ id, keys: [keyOf(current), keyOf(previous)] }, BODY);
    expect(both["webhook-signature"]!.split(" ")).toHaveLength(2);
    for (const s of [current, previous]) expect(new Webhook(s).verify(BODY, both)).toEqual(JSON.parse(BODY));
    expect(() => new Webhook(other).verify(BODY, both)).toThrow(WebhookVerificationError);
  });

  it("stamps the attempt's time; the library refuses a stale one", () => {
    const secret = newSigningSecret();
    const h = signatureHeaders({ id: "msg_x", keys: [keyOf(secret)] }, BODY, Math.floor(Date.now() / 1000) - 3600);
    expect(() => new Webhook(secret).verify(BODY, h)).toThrow(/too old/i);
  });

  it("derives the webhook-id from the account and the event's identity", () => {
    const id = webhookId("acme", '["SMS","DELIVERY","m-1",1]');
    expect(id).toMatch(/^msg_[A-Za-z0-9_-]{32}$/);
    expect(webhookId("acme", '["SMS","DELIVERY","m-1",1]')).toBe(id);
    expect(webhookId("acme", '["SMS","DELIVERY","m-1",2]')).not.toBe(id);
    expect(webhookId("other", '["SMS","DELIVERY","m-1",1]')).not.toBe(id);
  });
});
