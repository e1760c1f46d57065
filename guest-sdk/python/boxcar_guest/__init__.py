"""boxcar guest SDK for Python handlers (componentize-py 0.25).

A handler module defines one function and re-exports ``WitWorld``, the
class componentize-py looks for::

    from boxcar_guest import WitWorld, handler, info, Retry, Terminal

    @handler
    def handle(job):
        info(f"job {job.id}, attempt {job.attempt}")
        return {"echoed": job.payload}     # stored as the JSON result

- ``job.payload`` is the parsed JSON object; the returned value is
  JSON-encoded (``None`` stores no result).
- ``raise Retry(msg, retry_after_ms=..., consumes_attempt=...)`` retries later;
  ``raise Terminal(msg, code=..., details=...)`` fails now.
- Any other exception is a crash: retryable, consuming an attempt, with the
  exception's type and message; its traceback is logged.
- Host refusals (enqueue/progress) raise ``HostError``.
- Outbound HTTP: ``from boxcar_guest import http`` (see its docstring; the
  handler is built against the ``handler-http`` world).

Build (from the repository root)::

    componentize-py -d wit -w handler componentize my_handler \\
        -p path/to/handlers -p guest-sdk/python -o my_handler.wasm
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import wit_world
from componentize_py_types import Err
from wit_world.imports import host

try:
    from wit_world.imports import types as wit
except ImportError:
    # The `handler-http` world also imports `wasi:http/types`, so
    # componentize-py qualifies the name of ours.
    from wit_world.imports import boxcar_handler_types as wit  # type: ignore[no-redef]

__all__ = [
    "WitWorld",
    "handler",
    "Job",
    "Scope",
    "Child",
    "Retry",
    "Terminal",
    "HostError",
    "trace",
    "debug",
    "info",
    "warn",
    "error",
    "progress",
    "cancelled",
    "enqueue",
    "children",
]


class Retry(Exception):
    """Try again later. ``consumes_attempt=False`` gives the attempt back."""

    def __init__(
        self,
        message: str,
        retry_after_ms: Optional[int] = None,
        consumes_attempt: bool = True,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_ms = retry_after_ms
        self.consumes_attempt = consumes_attempt


class Terminal(Exception):
    """Fail now, without retrying. ``details`` is JSON-encoded."""

    def __init__(self, message: str, code: Optional[str] = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details


class HostError(Exception):
    """The host refused a call; ``kind`` is ``not-allowed``, ``limit-reached``,
    ``invalid`` or ``unavailable``."""

    _KINDS = {
        wit.HostError_NotAllowed: "not-allowed",
        wit.HostError_LimitReached: "limit-reached",
        wit.HostError_Invalid: "invalid",
        wit.HostError_Unavailable: "unavailable",
    }

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message

    @classmethod
    def _from_err(cls, e: Err) -> "HostError":
        v = e.value
        return cls(cls._KINDS.get(type(v), "unknown"), str(getattr(v, "value", v)))


@dataclass(frozen=True)
class Scope:
    type: str
    id: str


@dataclass(frozen=True)
class Job:
    """The job as a handler sees it."""

    id: str
    job_type: str
    payload: Any
    attempt: int
    max_attempts: int
    scope: Optional[Scope]
    schedule_id: Optional[str]
    parent_id: Optional[str]
    deadline_ms: int

    @property
    def last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    @classmethod
    def _from_wit(cls, j: wit.Job) -> "Job":
        return cls(
            id=j.id,
            job_type=j.job_type,
            payload=json.loads(j.payload),
            attempt=j.attempt,
            max_attempts=j.max_attempts,
            scope=Scope(j.scope.scope_type, j.scope.scope_id) if j.scope is not None else None,
            schedule_id=j.schedule_id,
            parent_id=j.parent_id,
            deadline_ms=j.deadline_ms,
        )


@dataclass(frozen=True)
class Child:
    id: str
    job_type: str
    status: str
    result: Any
    error: Optional[str]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _log(level: wit.LogLevel, message: Any) -> None:
    host.log(level, str(message))


def trace(message: Any) -> None:
    _log(wit.LogLevel.TRACE, message)


def debug(message: Any) -> None:
    _log(wit.LogLevel.DEBUG, message)


def info(message: Any) -> None:
    _log(wit.LogLevel.INFO, message)


def warn(message: Any) -> None:
    _log(wit.LogLevel.WARN, message)


def error(message: Any) -> None:
    _log(wit.LogLevel.ERROR, message)


def progress(value: Any) -> None:
    """Report progress: any JSON-serialisable value."""
    try:
        host.progress(_dumps(value))
    except Err as e:
        raise HostError._from_err(e) from None


def cancelled() -> bool:
    """True once the host wants this run to stop."""
    return host.cancelled()


def enqueue(
    job_type: str,
    payload: Any,
    *,
    scope: Optional[Scope] = None,
    dedupe_key: Optional[str] = None,
    delay_ms: Optional[int] = None,
    priority: Optional[int] = None,
    max_attempts: Optional[int] = None,
) -> str:
    """Enqueue a follow-up job of a type the manifest allows; returns its id."""
    options = wit.EnqueueOptions(
        scope=wit.Scope(scope.type, scope.id) if scope is not None else None,
        dedupe_key=dedupe_key,
        delay_ms=delay_ms,
        priority=priority,
        max_attempts=max_attempts,
    )
    try:
        return host.enqueue(job_type, _dumps(payload if payload is not None else {}), options)
    except Err as e:
        raise HostError._from_err(e) from None


def children() -> List[Child]:
    """The children of this job (flows); ``result`` is parsed JSON."""
    try:
        raw = host.children()
    except Err as e:
        raise HostError._from_err(e) from None
    return [
        Child(
            id=c.id,
            job_type=c.job_type,
            status=c.status,
            result=json.loads(c.result) if c.result is not None else None,
            error=c.error,
        )
        for c in raw
    ]


_handler: Optional[Callable[[Job], Any]] = None


def handler(fn: Callable[[Job], Any]) -> Callable[[Job], Any]:
    """Registers ``fn(job)`` as this module's handler (one per component)."""
    global _handler
    _handler = fn
    return fn


def _job_error(e: BaseException) -> wit.JobError:
    if isinstance(e, Retry):
        return wit.JobError_Retryable(
            wit.RetryableError(
                message=e.message,
                retry_after_ms=None if e.retry_after_ms is None else int(e.retry_after_ms),
                consumes_attempt=bool(e.consumes_attempt),
            )
        )
    if isinstance(e, Terminal):
        return wit.JobError_Terminal(
            wit.TerminalError(
                message=e.message,
                code=e.code,
                details=None if e.details is None else _dumps(e.details),
            )
        )
    # A crash: retryable, consuming an attempt.
    message = f"{type(e).__name__}: {e}"
    try:
        error("uncaught " + "".join(traceback.format_exception(e)))
    except BaseException:
        pass
    return wit.JobError_Retryable(
        wit.RetryableError(message=message, retry_after_ms=None, consumes_attempt=True)
    )


class WitWorld(wit_world.WitWorld):
    """The ``boxcar:handler/handler`` world's export, dispatching to the
    function registered with :func:`handler`."""

    def handle(self, job: wit.Job) -> Optional[str]:
        try:
            if _handler is None:
                raise Terminal("no handler registered: decorate a function with @boxcar_guest.handler")
            value = _handler(Job._from_wit(job))
            return None if value is None else _dumps(value)
        except BaseException as e:  # noqa: BLE001 - every failure (even SystemExit) is a job error
            raise Err(_job_error(e)) from None
