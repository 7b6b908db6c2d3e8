/** Webhook registration on the wire (spec parts 2 and 4, contract section 4 "Webhook"). */
import { MAX_CALLBACK_URL } from "./notifier.url";

export interface WebhookIn {
  callbackUrl: string;
}

export const webhookIn = {
  $id: "WebhookIn",
  type: "object",
  additionalProperties: false,
  required: ["callbackUrl"],
  properties: {
    callbackUrl: {
      type: "string",
      minLength: 1,
      maxLength: MAX_CALLBACK_URL,
      description: "HTTPS, port 443 or 8443, no credentials, no fragment; the host must resolve only to publicly reachable addresses.",
      examples: ["https://hooks.example.com/pgw/delivery"],
    },
  },
};

export interface WebhookOut {
  companyId: string;
  callbackUrl: string;
  createdAt: string;
  updatedAt: string;
}

export const webhookOut = {
  $id: "Webhook",
  type: "object",
  additionalProperties: false,
  required: ["companyId", "callbackUrl", "createdAt", "updatedAt"],
  properties: {
    companyId: { type: "string", examples: ["acme"] },
    callbackUrl: { type: "string", examples: ["https://hooks.example.com/pgw/delivery"] },
    createdAt: { type: "string", format: "date-time" },
    updatedAt: { type: "string", format: "date-time" },
  },
};
