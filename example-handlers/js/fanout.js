// Exercises the host interface: logs, checks cancelled(), reports progress,
// enqueues `count` js.echo children, reads children(), and shows that a type
// outside may_enqueue is refused.
//
// Payload: `{"count": 2, "delay_ms": 50}`.
import {
  handler,
  info,
  debug,
  progress,
  cancelled,
  enqueue,
  children,
  HostError,
} from "../../guest-sdk/js/boxcar.js";

export const handle = handler((job) => {
  const count = job.payload.count ?? 2;
  info(`fanning out ${count} js.echo jobs`);
  const ids = [];
  for (let i = 0; i < count; i++) {
    if (cancelled()) break;
    ids.push(
      enqueue(
        "js.echo",
        { n: i, parent: job.id },
        {
          scope: job.scope,
          dedupeKey: `fanout-${job.id}-${i}`,
          delayMs: job.payload.delay_ms,
          priority: 5,
          maxAttempts: 2,
        },
      ),
    );
    progress({ enqueued: i + 1, of: count });
  }
  let refused = null;
  try {
    enqueue("not.allowed", {});
  } catch (e) {
    if (!(e instanceof HostError)) throw e;
    debug(`refused as expected: ${e.message}`);
    refused = e.kind;
  }
  return { ids, children: children().length, refused };
});
