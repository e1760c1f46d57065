"""Always refuses: a terminal error with code ``content-refused`` and JSON
details (the payload's ``reason``, default ``policy``)."""

from boxcar_guest import Terminal, WitWorld, handler  # noqa: F401


@handler
def handle(job):
    reason = job.payload.get("reason", "policy")
    raise Terminal(
        f"refused: {reason}",
        code="content-refused",
        details={"reason": reason, "job_type": job.job_type, "attempt": job.attempt},
    )
