"""Fails with a retryable error until attempt ``succeed_on``, asking for at
least ``retry_after_ms`` before the next try; then succeeds.

Payload: ``{"succeed_on": 3, "retry_after_ms": 100, "keep_attempt": false}``.
"""

from boxcar_guest import Retry, Terminal, WitWorld, handler, warn  # noqa: F401


@handler
def handle(job):
    p = job.payload
    succeed_on = p.get("succeed_on")
    if not isinstance(succeed_on, int):
        raise Terminal("flaky: payload.succeed_on must be an integer", code="invalid-payload")
    if job.attempt >= succeed_on:
        return {"attempt": job.attempt}
    warn(f"attempt {job.attempt} of {job.max_attempts}: failing on purpose")
    raise Retry(
        f"flaky: attempt {job.attempt} < {succeed_on}",
        retry_after_ms=p.get("retry_after_ms"),
        consumes_attempt=not p.get("keep_attempt", False),
    )
