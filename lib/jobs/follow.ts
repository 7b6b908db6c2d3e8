/**
 * The loop of a feed's follower (lib/db/feeds.ts): one step at a time on this node, asked for by a
 * wake (the owner's broadcast after a commit), by a poll (the safety net for a lost broadcast), and
 * again at once when a step read a full batch. A step that found the cursor held by a peer, or
 * committed rows held back by a transaction still running, is retried after RECHECK_MS, twice as late
 * each time it happens again in a row without a row read meanwhile (a long transaction, not a busy
 * stream of short ones), up to RECHECK_MAX_MS; so is a step that failed (a deadlock, a
 * lost connection), which is logged. Its users: the notifier (the webhook-event feeds), the inbox
 * (tracking's inbound feed and its status feed).
 */
import type { Service } from "moleculer";
import { Coalesced } from "./coalesce";
import { Loops } from "./jobs";

const RECHECK_MS = 20;
const RECHECK_MAX_MS = 1000;

/** What a step of following found. */
export interface FollowStep {
  /** A peer held the cursor, or committed rows wait behind a running transaction: look again soon. */
  waiting: boolean;
  /** A full batch was read: there may be more now. */
  more: boolean;
  /** Rows were read (progress: a wait that follows starts again at RECHECK_MS). */
  progress?: boolean;
}

export class FeedLoop {
  private readonly steps: Coalesced;
  private readonly loops: Loops;
  private recheck: NodeJS.Timeout | null = null;
  private streak = 0;
  private closed = false;

  constructor(
    private readonly what: string,
    logger: Service["logger"],
    step: () => Promise<FollowStep>,
  ) {
    this.loops = new Loops(logger);
    this.steps = new Coalesced(
      async () => {
        const r = await step();
        if (r.progress) this.streak = 0;
        if (r.waiting) this.later();
        else this.streak = 0;
        if (r.more) this.steps.repeat();
      },
      (err) => {
        logger.warn({ err }, `could not follow ${what}; retrying`);
        this.later();
      },
    );
  }

  /** Follows now and every `pollMs`. */
  start(pollMs: number): void {
    this.loops.every(pollMs, `${this.what} poll`, () => this.wake());
    this.wake();
  }

  /** Follows now (or once more after the step in progress). */
  wake(): void {
    this.steps.request();
  }

  private later(): void {
    if (this.closed || this.recheck) return;
    const ms = Math.min(RECHECK_MAX_MS, RECHECK_MS * 2 ** this.streak++);
    this.recheck = setTimeout(() => {
      this.recheck = null;
      this.wake();
    }, ms);
    this.recheck.unref();
  }

  /** No step after this; resolves when the one in progress (if any) has ended. */
  async close(): Promise<void> {
    this.closed = true;
    this.loops.stop();
    if (this.recheck) clearTimeout(this.recheck);
    this.recheck = null;
    await this.steps.close();
  }
}
