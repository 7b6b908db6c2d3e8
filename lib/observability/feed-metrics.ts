/**
 * `feed_follow_lag_seconds{feed, follower}` on /metrics: how far behind each follower of a feed is
 * (lib/db/feeds.ts `feedLags`: seconds since the oldest row past its cursor was written, 0 when it
 * has read everything), read from the database at each scrape, so the same on every node that runs
 * the follower. One gauge per node, whichever of its services follow feeds (the notifier, the inbox,
 * contacts): a follower down or stuck shows here long before its owner keeps days of the feed for it.
 */
import type { ServiceBroker } from "moleculer";
import { Gauge, Registry } from "prom-client";
import type { Sequelize } from "sequelize";
import { feedLags, type FollowedFeed } from "../db/feeds";
import { addNodeRegistry, onePerScrape } from "./http-metrics";

interface Follower {
  follower: string;
  feeds: FollowedFeed[];
  read: () => Promise<Map<string, number> | null>;
}

const followersOf = new WeakMap<ServiceBroker, Follower[]>();

/** Counts `follower`'s lag on `feeds` in this node's `feed_follow_lag_seconds` (NaN while the database is away). */
export function trackFeedLag(broker: ServiceBroker, sequelize: Sequelize, follower: string, feeds: FollowedFeed[]): void {
  let followers = followersOf.get(broker);
  if (!followers) {
    followersOf.set(broker, (followers = []));
    const registry = new Registry();
    const all = followers;
    const gauge: Gauge<"feed" | "follower"> = new Gauge({
      name: "feed_follow_lag_seconds",
      help: "Seconds since the oldest row of a feed its follower has not read yet was written (0: all read), by feed and follower",
      labelNames: ["feed", "follower"] as const,
      registers: [registry],
      async collect() {
        for (const f of all) {
          const lags = await f.read();
          for (const { feed } of f.feeds) gauge.labels(feed, f.follower).set(lags ? (lags.get(feed) ?? 0) : Number.NaN);
        }
      },
    });
    addNodeRegistry(broker, registry);
  }
  if (followers.some((f) => f.follower === follower)) return;
  followers.push({ follower, feeds, read: onePerScrape<Map<string, number> | null>(() => feedLags(sequelize, feeds), null) });
}
