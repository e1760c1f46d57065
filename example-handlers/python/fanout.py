"""Exercises the host interface: logs, checks ``cancelled()``, reports
progress, enqueues ``count`` ``py.echo`` children, reads ``children()``, and
shows that a type outside ``may_enqueue`` is refused.

Payload: ``{"count": 2, "delay_ms": 50}``.
"""

from boxcar_guest import (  # noqa: F401
    HostError,
    WitWorld,
    cancelled,
    children,
    debug,
    enqueue,
    handler,
    info,
    progress,
)


@handler
def handle(job):
    count = int(job.payload.get("count", 2))
    info(f"fanning out {count} py.echo jobs")
    ids = []
    for i in range(count):
        if cancelled():
            break
        ids.append(
            enqueue(
                "py.echo",
                {"n": i, "parent": job.id},
                scope=job.scope,
                dedupe_key=f"fanout-{job.id}-{i}",
                delay_ms=job.payload.get("delay_ms"),
                priority=5,
                max_attempts=2,
            )
        )
        progress({"enqueued": i + 1, "of": count})
    try:
        enqueue("not.allowed", {})
        refused = None
    except HostError as e:
        debug(f"refused as expected: {e}")
        refused = e.kind
    return {"ids": ids, "children": len(children()), "refused": refused}
