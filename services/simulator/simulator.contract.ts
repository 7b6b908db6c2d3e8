/**
 * What other services may import from the simulator: the body of `simulator.send`, the upstream
 * adapter's call when UPSTREAM_MODE=simulator (lib/http/upstream.ts).
 */
import { CHANNELS } from "../../lib/messaging/channels";
import type { OutboundMessage } from "../../lib/http/upstream";
import { callerOf, type Action } from "../../lib/bus/calls";

/** At most this many messages per call (one registration transaction at the ingress). */
export const MAX_SIMULATOR_BATCH = 1000;

export interface SimulatorSendIn {
  messages: OutboundMessage[];
}

export const simulatorSendIn = {
  $id: "SimulatorSendIn",
  type: "object",
  additionalProperties: false,
  required: ["messages"],
  properties: {
    messages: {
      type: "array",
      minItems: 1,
      maxItems: MAX_SIMULATOR_BATCH,
      items: {
        type: "object",
        additionalProperties: false,
        required: ["companyId", "channel", "customerMessageId", "destination", "text"],
        properties: {
          companyId: { type: "string", minLength: 1, maxLength: 100 },
          channel: { type: "string", enum: [...CHANNELS] },
          customerMessageId: { type: "string", minLength: 1, maxLength: 200 },
          destination: { type: "string", pattern: "^\\+[1-9][0-9]{6,14}$" },
          text: { type: "string", maxLength: 10000 },
          mediaIds: { type: "array", items: { type: "string", maxLength: 100 }, maxItems: 10 },
          campaignId: { type: "string", minLength: 1, maxLength: 100 },
          senderId: { type: "string", minLength: 1, maxLength: 200 },
          simulation: { type: "boolean" },
        },
      },
    },
  },
};

/** What other services call of the simulator (lib/bus/calls.ts): the upstream adapter's `simulator.send`. */
export interface SimulatorActions {
  "simulator.send": Action<SimulatorSendIn, { accepted: number }>;
}
export const callSimulator = callerOf<SimulatorActions>();
