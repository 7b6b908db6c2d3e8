/**
 * The least pace of an upload's body (contract section 9): a body that brings fewer than
 * UPLOAD_MIN_BYTES in some UPLOAD_MIN_WINDOW_MS (16 KiB in 30 s) is ended with 408, so a client
 * that trickles cannot hold its spool reservation, and a socket, for as long as it likes.
 */
import type { IncomingMessage } from "node:http";
import { ApiError } from "../../lib/errors";

export interface UploadPace {
  /** Bytes the body must bring in every window (0: never checked). */
  minBytes: number;
  windowMs: number;
}

/** The window slides in steps of a sixth of it: a stall is seen at most a step after a whole window of it. */
const STEPS = 6;

const amount = (n: number) => (n % 1024 === 0 ? `${n / 1024} KiB` : `${n} bytes`);
const duration = (ms: number) => (ms % 1000 === 0 ? `${ms / 1000} s` : `${ms} ms`);

/** The 408 of an upload ended for its pace. */
export function tooSlow(pace: UploadPace): ApiError {
  return new ApiError(
    "UPLOAD_TOO_SLOW",
    `The upload sent less than ${amount(pace.minBytes)} in ${duration(pace.windowMs)} and was ended; send the file at a steady pace, then retry.`,
    { minBytes: pace.minBytes, windowMs: pace.windowMs },
  );
}

/**
 * Counts the bytes the socket of `req` brings while its body is read, and calls `onSlow` (once)
 * when a whole window brought fewer than `pace.minBytes`. Time the gateway itself holds the body
 * back (`req` paused: the spool's writes pushing back) is never held against the client: the window
 * starts again after it. Stops by itself once the body is complete; answers the function that stops
 * watching (call it when the body has been read or the upload has failed).
 */
export function watchPace(req: IncomingMessage, pace: UploadPace, onSlow: () => void): () => void {
  if (pace.minBytes <= 0) return () => undefined;
  const socket = req.socket;
  const steps: number[] = [];
  let last = socket.bytesRead;
  let heldBack = req.isPaused();
  const onPause = () => {
    heldBack = true;
  };
  const timer = setInterval(
    () => {
      const now = socket.bytesRead;
      const brought = now - last;
      last = now;
      if (req.complete) return stop();
      if (heldBack || req.isPaused()) {
        heldBack = req.isPaused();
        steps.length = 0;
        return;
      }
      steps.push(brought);
      if (steps.length > STEPS) steps.shift();
      if (steps.length === STEPS && steps.reduce((sum, n) => sum + n, 0) < pace.minBytes) {
        stop();
        onSlow();
      }
    },
    Math.max(1, Math.floor(pace.windowMs / STEPS)),
  );
  timer.unref();
  req.on("pause", onPause);
  function stop(): void {
    clearInterval(timer);
    req.off("pause", onPause);
  }
  return stop;
}
