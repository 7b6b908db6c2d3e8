/**
 * The operator's commands of `npm run repl` (scripts/repl.ts), beside moleculer-repl's own: the live
 * state that matters, asked of the nodes that own it.
 * - `cluster`: every live node and the services it runs (moleculer-repl's `nodes` counts them; a
 *   custom command may not take a built-in command's name, so this one is `cluster`);
 * - `outbox`: webhook events waiting, per channel (a notifier node answers);
 * - `exports`: export jobs waiting and running (an exports node);
 * - `campaigns`: campaigns sending, with their progress (a campaigns node);
 * - `keys`: the API keys each gateway node holds in its cache (every gateway node).
 * A service with no live node, or a call that fails, is one line saying so, never a stack trace.
 */
import type { ServiceBroker } from "moleculer";
import { formatTable, type OpsTable } from "../observability/ops";

const CALL_TIMEOUT_MS = 5000;

interface NodeInfo {
  id: string;
  available: boolean;
  local?: boolean;
  services?: { name: string }[];
}

const liveNodes = (broker: ServiceBroker): NodeInfo[] =>
  (broker.registry.getNodeList({ onlyAvailable: true, withServices: true }) as unknown as NodeInfo[]).sort((a, b) => a.id.localeCompare(b.id));

const runs = (node: NodeInfo, service: string) => (node.services ?? []).some((s) => s.name === service);

const why = (e: unknown) => (e instanceof Error ? e.message : String(e)).split("\n")[0];

/** Moleculer REPL custom command definitions (moleculer-repl's `customCommands`). */
interface ReplCommand {
  command: string;
  description: string;
  action(broker: ServiceBroker): Promise<void>;
}

/** One table asked of any node of `service`: printed, or one line saying why not. */
function tableCommand(command: string, description: string, service: string, action: string): ReplCommand {
  return {
    command,
    description,
    async action(broker) {
      if (!liveNodes(broker).some((n) => runs(n, service))) {
        console.log(`no ${service} node is running`);
        return;
      }
      try {
        console.log(formatTable((await broker.call(`${service}.${action}`, {}, { timeout: CALL_TIMEOUT_MS })) as OpsTable));
      } catch (e) {
        console.log(`${command}: ${service} did not answer: ${why(e)}`);
      }
    },
  };
}

export function operatorCommands(): ReplCommand[] {
  return [
    {
      command: "cluster",
      description: "Every live node and the services it runs",
      async action(broker) {
        const rows = liveNodes(broker).map((n) => {
          const services = [...new Set((n.services ?? []).map((s) => s.name).filter((s) => !s.startsWith("$")))].sort();
          return [n.id === broker.nodeID ? `${n.id} (this REPL)` : n.id, services.length > 0 ? services.join(", ") : "-"];
        });
        console.log(formatTable({ columns: ["node", "services"], rows }));
      },
    },
    tableCommand("outbox", "Webhook events waiting per channel: depth, claimed now, oldest due", "notifier", "opsOutbox"),
    tableCommand("exports", "Export jobs waiting and running", "exports", "opsQueue"),
    tableCommand("campaigns", "Campaigns sending now and their progress", "campaigns", "opsSending"),
    {
      command: "keys",
      description: "API keys held in each gateway node's cache",
      async action(broker) {
        const gateways = liveNodes(broker).filter((n) => runs(n, "gateway"));
        if (gateways.length === 0) {
          console.log("no gateway node is running");
          return;
        }
        const rows = await Promise.all(
          gateways.map((n) =>
            broker.call("gateway.opsKeyCache", {}, { nodeID: n.id, timeout: CALL_TIMEOUT_MS }).then(
              (r) => [n.id, (r as { size: number }).size],
              (e: unknown) => [n.id, `did not answer: ${why(e)}`],
            ),
          ),
        );
        console.log(formatTable({ columns: ["gateway node", "cached keys"], rows }));
      },
    },
  ];
}
