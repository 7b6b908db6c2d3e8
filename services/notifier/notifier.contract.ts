/**
 * What other services need of the notifier: the event that wakes it. A service that commits
 * outbox_events rows broadcasts OUTBOX_WRITTEN after the commit, so notifiers claim them at once
 * instead of at their next poll (NOTIFIER_POLL_MS, the safety net: a lost broadcast only delays).
 */
export const OUTBOX_WRITTEN = "notifier.outboxWritten";
