/**
 * A ledger of disk space one node has promised to files it is about to write under one directory
 * (the gateway's upload spool, contacts' IMPORT_DIR). A reservation is taken, and grown, in one
 * synchronous check-and-add, so concurrent requests can never all pass the check before any of them
 * is counted; a node total and a per-account share (so that one account cannot take the whole
 * budget) bound it. Releasing is idempotent. One instance per directory and node. Refused: 429 when
 * the account's own share is what does not fit (another account still does), 503 when the node's is.
 */
import { ApiError } from "../errors";

/** Seconds a refused upload is told to wait (Retry-After): room comes back as imports and uploads end. */
export const DISK_FULL_RETRY_AFTER_S = 30;

export class Reservation {
  private released = false;
  constructor(
    private readonly budget: DiskBudget,
    readonly account: string,
    private held: number,
  ) {}

  /** Bytes held now. */
  get bytes(): number {
    return this.released ? 0 : this.held;
  }

  /** Grows the reservation to `total` bytes (never shrinks it); false, holding what it held, when there is no room. */
  growTo(total: number): boolean {
    if (this.released) return false;
    if (total <= this.held) return true;
    if (!this.budget.take(this.account, total - this.held)) return false;
    this.held = total;
    return true;
  }

  /** Gives the bytes back (once: later calls do nothing). */
  release(): void {
    if (this.released) return;
    this.released = true;
    this.budget.give(this.account, this.held);
  }
}

export class DiskBudget {
  private total = 0;
  private readonly perAccount = new Map<string, number>();

  /**
   * @param maxBytes the most this node holds in all
   * @param accountMaxBytes the most one account holds (at most maxBytes)
   */
  constructor(
    readonly maxBytes: number,
    readonly accountMaxBytes: number = maxBytes,
  ) {}

  /** A budget of `maxBytes` of which one account may hold the part `share` (0 < share <= 1, UPLOAD_ACCOUNT_SHARE). */
  static withShare(maxBytes: number, share: number): DiskBudget {
    return new DiskBudget(maxBytes, Math.min(maxBytes, Math.floor(maxBytes * share)));
  }

  /** Bytes reserved on this node, in all or for one account. */
  used(account?: string): number {
    return account === undefined ? this.total : (this.perAccount.get(account) ?? 0);
  }

  /** Reserves `bytes` for `account` if both the node total and the account's share allow it; null otherwise. */
  reserve(account: string, bytes: number): Reservation | null {
    if (!this.take(account, bytes)) return null;
    return new Reservation(this, account, bytes);
  }

  /** @internal the check-and-add (synchronous: nothing runs between the check and the add). */
  take(account: string, bytes: number): boolean {
    if (!Number.isFinite(bytes) || bytes < 0) return false;
    const mine = this.perAccount.get(account) ?? 0;
    if (this.total + bytes > this.maxBytes || mine + bytes > this.accountMaxBytes) return false;
    this.total += bytes;
    this.perAccount.set(account, mine + bytes);
    return true;
  }

  /** @internal */
  give(account: string, bytes: number): void {
    this.total -= bytes;
    const left = (this.perAccount.get(account) ?? 0) - bytes;
    if (left > 0) this.perAccount.set(account, left);
    else this.perAccount.delete(account);
  }
}

/** The 503 a full budget answers, with Retry-After (the gateway sets the header from `retryAfter`). */
export function diskFull(message: string): ApiError {
  return new ApiError("SERVICE_UNAVAILABLE", message, { retryAfter: DISK_FULL_RETRY_AFTER_S });
}

/** What `budget` answers when `bytes` more for `account` did not fit, in the words of `detail`. */
export interface NoRoomDetail {
  /** The account's share is held (by its own uploads or imports). */
  account: string;
  /** The node's budget is full. */
  node: string;
}

/**
 * The answer to a reservation (or a growth of one by `bytes`) that `budget` refused: past the
 * account's own share a 429 (its own reservations must end first; the others are not concerned),
 * else the node's 503. Both say when to retry. Call it at once after the refusal (nothing between).
 */
export function noRoom(budget: DiskBudget, account: string, bytes: number, detail: NoRoomDetail): ApiError {
  if (budget.used(account) + bytes > budget.accountMaxBytes) {
    return new ApiError("UPLOAD_SHARE_EXCEEDED", detail.account, { retryAfter: DISK_FULL_RETRY_AFTER_S });
  }
  return diskFull(detail.node);
}
