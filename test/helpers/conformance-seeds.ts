/**
 * The data a conformance walk needs so that it reaches success paths, not only 404s: one of each
 * resource, made through the public API (and the internal ingress, for what upstreams report), kept
 * for the reads, and fresh ones on demand for the operations that change or delete what they name
 * (so a DELETE never takes away what a later operation reads).
 */
import { randomBytes } from "node:crypto";
import type { Account, TestApp } from "./app";
import { contactIn, inboundIn, listIn, messageIn, phone, smsReceiptIn } from "./builders";
import { eventually } from "./eventually";
import { gif, jpeg, mediaForm, mp4, png, webp } from "./media";
import { singular, type Operation } from "./oas";

export type Kind =
  | "list"
  | "contact"
  | "campaign"
  | "media"
  | "profile"
  | "key"
  | "conversation"
  | "message"
  | "import"
  | "export"
  | "association"
  | "field"
  | "sentMessage"
  | "download"
  | "optOutChannel"
  | "optOutNumber";

/** The resource a path parameter names: the collection its path starts with (longest first). */
const COLLECTIONS: Array<[RegExp, Kind]> = [
  [/^\/exports\/\{exportId\}\/download\//, "download"],
  [/^\/contacts\/list\/contacts\//, "association"],
  [/^\/contacts\/list\//, "list"],
  [/^\/contacts\/custom-fields\//, "field"],
  [/^\/contacts\/imports\//, "import"],
  [/^\/contacts\/opt-outs\/\{channel\}\//, "optOutNumber"],
  [/^\/contacts\/opt-outs\//, "optOutChannel"],
  [/^\/contacts\//, "contact"],
  [/^\/campaigns\//, "campaign"],
  [/^\/media\//, "media"],
  [/^\/social-profiles\//, "profile"],
  [/^\/exports\//, "export"],
  [/^(\/inbox)?\/conversations\//, "conversation"],
  [/^\/authentication\//, "key"],
  [/^\/messages\/status\//, "sentMessage"],
];
export const kindOf = (prefix: string): Kind | undefined => COLLECTIONS.find(([re]) => re.test(prefix + "/"))?.[1];
export const paramKind = (op: Operation, name: string) => kindOf(op.path.slice(0, op.path.indexOf(`{${name}}`) - 1))!;

/** Body and query fields whose value names a resource of the account (array fields by their item's name). */
const FIELD_KINDS: Record<string, Kind> = {
  listId: "list",
  contactListId: "list",
  contactId: "contact",
  excludeIdsAllContacts: "contact",
  mediaId: "media",
  campaignId: "campaign",
  upToMessageId: "message",
  customerMessageId: "sentMessage",
};
export function fieldKind(op: Operation, name: string): Kind | undefined {
  const one = FIELD_KINDS[name] ?? FIELD_KINDS[singular(name)];
  return one ?? (singular(name) === "id" && op.path.startsWith("/contacts/list") ? "list" : undefined);
}

/** Custom fields the account declares, with a value of each type. */
export const DECLARED_FIELDS = { tier: "gold", score: 42, vip: true, birthday: "1990-04-01" } as const;
const FIELD_TYPES: Record<keyof typeof DECLARED_FIELDS, string> = { tier: "TEXT", score: "NUMBER", vip: "BOOLEAN", birthday: "DATE" };

/** A CSV an import takes: headers named as contact fields and declared custom fields. */
export const csvFile = () => `firstName,lastName,phoneNumber,email,tier\nAna,Import,${phone()},imp.${randomBytes(3).toString("hex")}@example.com,gold\n`;
/** A vCard 4.0 file of one card. */
export const vcfFile = () => ["BEGIN:VCARD", "VERSION:4.0", "FN:Rui Card", "N:Card;Rui;;;", `TEL;TYPE=cell:${phone()}`, "END:VCARD", ""].join("\r\n");

/** Files for a multipart `file` field, chosen by the formats its description names. */
export const FILES: Array<[RegExp, string, () => Buffer | string]> = [
  [/\bCSV\b/, "contacts.csv", csvFile],
  [/\bVCF\b/, "people.vcf", vcfFile],
  [/\bJPEG\b/, "photo.jpg", () => jpeg()],
  [/\bPNG\b/, "image.png", () => png()],
  [/\bGIF\b/, "anim.gif", () => gif()],
  [/\bWEBP\b/, "image.webp", () => webp()],
  [/\bMP4\b/, "clip.mp4", () => mp4()],
];

export interface CampaignState {
  state: "DRAFT" | "SCHEDULED" | "PAUSED";
}

export class Seeds {
  /** Every id the walk made, by kind (a value not in here was not seeded). */
  readonly made = new Map<Kind, Set<string>>();
  readonly shared = new Map<Kind, string>();
  conversationMessage = new Map<string, string>();
  sentDestinations: string[] = [];
  cursor = "";
  etag = "";
  download = { exportId: "", expires: "", signature: "" };

  constructor(
    private readonly t: TestApp,
    readonly a: Account,
  ) {}

  private note(kind: Kind, id: unknown): string {
    const s = String(id);
    if (!this.made.has(kind)) this.made.set(kind, new Set());
    this.made.get(kind)!.add(s);
    return s;
  }

  isSeeded(kind: Kind, value: unknown): boolean {
    return this.made.get(kind)?.has(String(value)) ?? false;
  }

  private async ok(res: Promise<{ status: number; text: string; body: any }>, status: number, what: string) {
    const r = await res;
    if (r.status !== status) throw new Error(`seeding ${what}: ${r.status} ${r.text.slice(0, 500)}`);
    return r.body;
  }

  /** One of each, kept for every operation that only reads. */
  async seedShared(): Promise<void> {
    const api = this.a.api;
    for (const [key, type] of Object.entries(FIELD_TYPES)) await this.ok(api.post("/contacts/custom-fields", { key, type }), 201, "custom field");
    this.note("field", "tier");
    this.shared.set("field", "tier");
    this.shared.set("contact", await this.fresh("contact"));
    this.shared.set("list", await this.fresh("list"));
    this.shared.set("association", await this.fresh("association"));
    const media = await this.ok(api.request("POST", "/media", { form: mediaForm(png(4, 3), "seed.png") }), 201, "media");
    this.shared.set("media", this.note("media", media.id));
    this.etag = `"${media.sha256}"`;
    this.shared.set("campaign", await this.fresh("campaign"));
    this.shared.set("profile", await this.fresh("profile"));
    this.shared.set("key", this.note("key", this.a.key.id));
    this.shared.set("conversation", await this.fresh("conversation"));
    this.shared.set("message", this.conversationMessage.get(this.shared.get("conversation")!)!);
    // Sent messages with receipts: the history has pages (a cursor) and statuses.
    for (let i = 0; i < 3; i++) this.shared.set("sentMessage", await this.fresh("sentMessage"));
    const page = await this.ok(api.get("/messages/history?limit=1"), 200, "history");
    this.cursor = page.nextCursor;
    this.shared.set("import", await this.fresh("import"));
    const exportId = await this.fresh("export");
    this.shared.set("export", exportId);
    const link = await eventually(
      async () => {
        const r = await api.get(`/exports/${exportId}`);
        if (r.status !== 200) throw new Error(`export not ready: ${r.status}`);
        return r.body;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    const [, id, expires, signature] = /\/exports\/([^/]+)\/download\/([^/]+)\/([^/?]+)/.exec(new URL(link.downloadUrl).pathname)!;
    this.download = { exportId: id!, expires: expires!, signature: signature! };
  }

  private optOuts = 0;

  /** A new opt-out (its channel and number name it in a path), made for one request. */
  async freshOptOut(): Promise<{ channel: string; phoneNumber: string }> {
    const body = { channel: "SMS", phoneNumber: `+1415555${String(1000 + (this.optOuts++ % 9000)).slice(-4)}` };
    const res = await this.a.api.post("/contacts/opt-outs", body);
    if (res.status !== 201 && res.status !== 200) throw new Error(`seed opt-out: ${res.status} ${res.text}`);
    this.note("optOutChannel", body.channel);
    this.note("optOutNumber", body.phoneNumber);
    return body;
  }

  /** A new resource of `kind` (a campaign in the state asked for), made for one request. */
  async fresh(kind: Kind, o: Partial<CampaignState> = {}): Promise<string> {
    const api = this.a.api;
    switch (kind) {
      case "contact":
        return this.note(
          kind,
          (await this.ok(api.post("/contacts", contactIn({ email: `seed.${randomBytes(4).toString("hex")}@example.com` })), 201, kind)).id,
        );
      case "list":
        return this.note(kind, (await this.ok(api.post("/contacts/list", listIn()), 201, kind)).id);
      case "association": {
        const contactId = await this.fresh("contact");
        const listId = this.shared.get("list") ?? (await this.fresh("list"));
        const added = await this.ok(api.post("/contacts/list/contacts", { listIds: [Number(listId)], contactIds: [contactId] }), 201, kind);
        return this.note(kind, added.ids[0]);
      }
      case "media":
        return this.note(kind, (await this.ok(api.request("POST", "/media", { form: mediaForm(png(2, 2), "fresh.png") }), 201, kind)).id);
      case "campaign": {
        const listId = await this.fresh("list");
        const contactId = await this.fresh("contact");
        await this.ok(api.post("/contacts/list/contacts", { listIds: [Number(listId)], contactIds: [contactId] }), 201, "campaign audience");
        const state = o.state ?? "DRAFT";
        const scheduledAt = state === "DRAFT" ? null : new Date(Date.now() + 86_400_000).toISOString();
        const body = {
          name: `Walk ${randomBytes(3).toString("hex")}`,
          channel: "SMS",
          contactListIds: [Number(listId)],
          message: { text: "Hi {{firstName|there}}" },
          scheduledAt,
        };
        const id = this.note(kind, (await this.ok(api.post("/campaigns", body), 201, kind)).id);
        if (state !== "DRAFT") await this.ok(api.put(`/campaigns/${id}/confirm`, {}), 202, "confirm");
        if (state === "PAUSED") await this.ok(api.put(`/campaigns/${id}/pause`, {}), 200, "pause");
        return id;
      }
      case "profile": {
        const body = { network: "FACEBOOK", externalId: `ext-${randomBytes(5).toString("hex")}`, displayName: "Walk", accessToken: "tok" };
        return this.note(kind, (await this.ok(api.post("/social-profiles", body), 201, kind)).id);
      }
      case "key":
        return this.note(kind, (await this.ok(api.post("/authentication", { operations: ["SMS"] }), 201, kind)).id);
      case "conversation":
      case "message": {
        const msg = inboundIn(this.a.companyId, { source: phone() });
        await this.ok(this.t.ingress.post("/inbound/rcs", msg), 202, "inbound");
        const found = await this.ok(api.get(`/inbox/conversations?search=${encodeURIComponent(msg.source)}`), 200, "conversation");
        const chatId = this.note("conversation", found.data[0].chatId);
        this.conversationMessage.set(chatId, this.note("message", msg.messageId));
        return kind === "conversation" ? chatId : msg.messageId;
      }
      case "sentMessage": {
        const m = messageIn(this.a.companyId);
        await this.ok(this.t.ingress.post("/messages", m), 202, "message");
        await this.ok(this.t.ingress.post("/receipts/sms", smsReceiptIn(m)), 202, "receipt");
        this.sentDestinations.push(m.destination);
        return this.note(kind, m.customerMessageId);
      }
      case "import": {
        const form = new FormData();
        form.append("file", new Blob([csvFile()]), "seed.csv");
        return this.note(kind, (await this.ok(api.request("POST", "/contacts/upload", { form }), 202, kind)).importId);
      }
      case "export":
        return this.note(kind, (await this.ok(api.post("/exports/contacts", {}), 202, kind)).exportId);
      case "field": {
        const key = `f${randomBytes(4).toString("hex")}`;
        await this.ok(api.post("/contacts/custom-fields", { key, type: "TEXT" }), 201, kind);
        return this.note(kind, key);
      }
      case "download":
        throw new Error("a download URL is only shared");
      case "optOutChannel":
        return (await this.freshOptOut()).channel;
      case "optOutNumber":
        return (await this.freshOptOut()).phoneNumber;
    }
  }

  /** The singleton webhook: made (or removed) so that the next request meets the state it needs. */
  async webhook(present: boolean): Promise<void> {
    const api = this.a.api;
    const has = (await api.get("/webhooks/delivery-status")).status === 200;
    if (present && !has) await this.ok(api.post("/webhooks/delivery-status", { callbackUrl: "https://93.184.216.34/pgw/delivery" }), 201, "webhook");
    if (!present && has) await this.ok(api.delete("/webhooks/delivery-status"), 204, "webhook removal");
  }
}
