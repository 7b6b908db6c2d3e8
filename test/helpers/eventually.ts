/**
 * Polling instead of sleeping: `eventually` retries an (async) assertion until it passes or the
 * deadline is reached, then throws the last error, so a test waits exactly as long as the behaviour
 * takes and fails with the assertion that never came true.
 */
export interface EventuallyOptions {
  /** Give up after this long (default 10 s). */
  timeoutMs?: number;
  /** Pause between tries (default 50 ms). */
  intervalMs?: number;
}

/** Runs `fn` until it returns without throwing; answers its result. After `timeoutMs` the last error is thrown. */
export async function eventually<T>(fn: () => T | Promise<T>, opts: EventuallyOptions = {}): Promise<T> {
  const { timeoutMs = 10_000, intervalMs = 50 } = opts;
  const deadline = Date.now() + timeoutMs;
  for (let tries = 1; ; tries++) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() >= deadline) {
        if (err instanceof Error) err.message = `${err.message}\n(still failing after ${tries} tries over ${timeoutMs} ms)`;
        throw err;
      }
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** A promise with its resolve at hand (to hold a test action until the test lets it go). */
export interface Deferred<T = void> {
  promise: Promise<T>;
  resolve(value: T): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}
