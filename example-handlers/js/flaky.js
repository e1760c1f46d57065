// Fails with a retryable error until attempt `succeed_on`, asking for at
// least `retry_after_ms` before the next try; then succeeds.
//
// Payload: `{"succeed_on": 3, "retry_after_ms": 100, "keep_attempt": false}`.
import { handler, warn, Retry, Terminal } from "../../guest-sdk/js/boxcar.js";

export const handle = handler((job) => {
  const p = job.payload;
  if (!Number.isInteger(p.succeed_on)) {
    throw new Terminal("flaky: payload.succeed_on must be an integer", { code: "invalid-payload" });
  }
  if (job.attempt >= p.succeed_on) {
    return { attempt: job.attempt };
  }
  warn(`attempt ${job.attempt} of ${job.maxAttempts}: failing on purpose`);
  throw new Retry(`flaky: attempt ${job.attempt} < ${p.succeed_on}`, {
    retryAfterMs: p.retry_after_ms,
    consumesAttempt: !p.keep_attempt,
  });
});
