/**
 * A node's runtime on /metrics, beside what its services count: Node's own (event-loop lag, GC,
 * heap, CPU: prom-client's default metrics, under their usual names), the database pool of this
 * process, and the piscina pools of its workers (exports writing CSV, contacts parsing imports).
 * Everything is read on scrape; nothing runs between scrapes but the event-loop monitor.
 */
import type { ServiceBroker } from "moleculer";
import type { Piscina } from "piscina";
import { collectDefaultMetrics, Gauge, Registry } from "prom-client";
import type { Database } from "../db/db";
import { addNodeRegistry } from "./http-metrics";

/** The worker pools alive in this process, by the name of their module. */
const pools = new Map<Piscina, string>();

/** Counts `pool` on /metrics as `name` until `untrackPool` (lib/jobs/worker-pool.ts destroyPool). */
export function trackPool(pool: Piscina, name: string): Piscina {
  pools.set(pool, name);
  return pool;
}

/** Stops counting `pool` (it is being destroyed). */
export function untrackPool(pool: Piscina): void {
  pools.delete(pool);
}

export function addRuntimeMetrics(broker: ServiceBroker, db: Database): void {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const connections: Gauge<"state"> = new Gauge({
    name: "db_pool_connections",
    help: "Connections of this process's database pool that are open (in use by a query or transaction, or idle)",
    labelNames: ["state"] as const,
    registers: [registry],
    collect() {
      connections.labels("open").set(db.poolStats().open);
    },
  });
  const waiting: Gauge = new Gauge({
    name: "db_pool_waiting",
    help: "Queries and transactions waiting for a connection of this process's pool",
    registers: [registry],
    collect() {
      waiting.set(db.poolStats().waiting);
    },
  });
  const max: Gauge = new Gauge({
    name: "db_pool_max",
    help: "Connections this process's pool may open (its limit)",
    registers: [registry],
    collect() {
      max.set(db.poolStats().max);
    },
  });
  const perPool = ({ name, help }: { name: string; help: string }, read: (p: Piscina) => number) => {
    const g: Gauge<"pool"> = new Gauge({
      name,
      help,
      labelNames: ["pool"] as const,
      registers: [registry],
      collect() {
        g.reset();
        for (const [p, label] of pools) g.labels(label).set(read(p));
      },
    });
  };
  perPool({ name: "worker_pool_threads", help: "Worker threads alive in the pool" }, (p) => p.threads.length);
  perPool({ name: "worker_pool_queue_size", help: "Tasks waiting for a worker thread of the pool" }, (p) => p.queueSize);
  perPool({ name: "worker_pool_utilization", help: "Share of the pool's capacity used since it started (0-1, piscina's utilization)" }, (p) => p.utilization);
  addNodeRegistry(broker, registry);
}
