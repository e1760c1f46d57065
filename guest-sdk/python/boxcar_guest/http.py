"""Outbound HTTP over ``wasi:http``, for handlers whose manifest grants it
(``capabilities.http``, an allow-list of ``scheme://host[:port]``).

Build the handler against the ``handler-http`` world (it adds
``wasi:http/outgoing-handler`` to ``handler``)::

    componentize-py -d wit -w handler-http componentize my_handler \\
        -p path/to/handlers -p guest-sdk/python -o my_handler.wasm

Use::

    from boxcar_guest import http

    page = http.get("https://example.com/")
    page.status, page.header("content-type"), page.text()

Semantics (the same as the Rust SDK's ``boxcar_guest::http``):

- The host checks every request against the allow-list before any
  connection is made; a refused request raises :class:`HttpError` with
  ``kind == "denied"`` (and leaves a line in the job's log). The guest
  cannot see or widen the list.
- Redirects (301, 302, 303, 307, 308) are followed here, up to
  ``max_redirects`` (default 5). Each hop is a new request, so the host
  checks it against the list again: a redirect to a host not on the list
  ends in ``kind == "denied"``.
- Response bodies are capped by the host (``limits.max_http_body``); a
  longer one raises ``kind == "body-too-large"``.
- The job's deadline applies: a request still waiting when it passes is cut
  off with the job.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple, Union
from urllib.parse import urljoin, urlsplit

from componentize_py_types import Err
from wit_world.imports import outgoing_handler
from wit_world.imports import streams
from wit_world.imports import wasi_http_types as t

__all__ = ["HttpError", "Response", "get", "post", "request"]

Headers = Union[Dict[str, str], List[Tuple[str, str]], None]

_REDIRECTS = (301, 302, 303, 307, 308)
_TIMEOUTS = (
    t.ErrorCode_ConnectionTimeout,
    t.ErrorCode_ConnectionReadTimeout,
    t.ErrorCode_ConnectionWriteTimeout,
    t.ErrorCode_HttpResponseTimeout,
    t.ErrorCode_DnsTimeout,
)
_METHODS = {
    "GET": t.Method_Get,
    "HEAD": t.Method_Head,
    "POST": t.Method_Post,
    "PUT": t.Method_Put,
    "DELETE": t.Method_Delete,
    "PATCH": t.Method_Patch,
    "OPTIONS": t.Method_Options,
}


class HttpError(Exception):
    """Why a request failed. ``kind`` is one of ``invalid-url``, ``denied``,
    ``too-many-redirects``, ``body-too-large``, ``timeout``, ``failed``;
    ``url`` is the URL of the request that failed."""

    def __init__(self, kind: str, message: str, url: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.url = url

    @classmethod
    def _from_code(cls, code: Any, url: str) -> "HttpError":
        if isinstance(code, t.ErrorCode_HttpRequestDenied):
            return cls(
                "denied",
                f"request to {url} refused by the host: its origin is not in the "
                "handler's capabilities.http allow-list",
                url,
            )
        if isinstance(code, t.ErrorCode_HttpResponseBodySize):
            return cls(
                "body-too-large",
                "the response body is larger than the host allows (limits.max_http_body)",
                url,
            )
        if isinstance(code, _TIMEOUTS):
            return cls("timeout", f"the request to {url} timed out", url)
        return cls("failed", f"HTTP request to {url} failed: {type(code).__name__.split('_', 1)[-1]}", url)


class Response:
    """A received response: ``status``, ``headers`` (lowercase names, in
    order), ``body`` (bytes) and the final ``url`` after redirects."""

    def __init__(self, status: int, headers: List[Tuple[str, bytes]], body: bytes, url: str) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.url = url

    @property
    def ok(self) -> bool:
        """True for a 2xx status."""
        return 200 <= self.status < 300

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name`` (case-insensitive), decoded."""
        name = name.lower()
        for n, v in self.headers:
            if n == name:
                return v.decode("latin-1")
        return None

    def text(self) -> str:
        """The body decoded as UTF-8 (invalid bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


def get(url: str, headers: Headers = None, max_redirects: int = 5) -> Response:
    """``GET url``, following redirects."""
    return request("GET", url, headers=headers, max_redirects=max_redirects)


def post(
    url: str,
    body: Union[bytes, str, None] = None,
    *,
    json_body: Any = None,
    headers: Headers = None,
    max_redirects: int = 5,
) -> Response:
    """``POST url`` with ``body`` (bytes or text) or ``json_body`` (encoded,
    with ``content-type: application/json``)."""
    header_list = _header_list(headers)
    if json_body is not None:
        body = json.dumps(json_body, separators=(",", ":"))
        if not any(n.lower() == "content-type" for n, _ in header_list):
            header_list.append(("content-type", "application/json"))
    return request("POST", url, headers=header_list, body=body, max_redirects=max_redirects)


def request(
    method: str,
    url: str,
    *,
    headers: Headers = None,
    body: Union[bytes, str, None] = None,
    max_redirects: int = 5,
) -> Response:
    """Sends ``method url`` and returns the final response, following up to
    ``max_redirects`` redirects (``0`` returns the redirect itself).

    Raises :class:`HttpError`."""
    method = method.upper()
    header_list = _header_list(headers)
    data = body.encode("utf-8") if isinstance(body, str) else body
    hops = 0
    while True:
        response = _send_once(method, url, header_list, data)
        location = response.header("location") if response.status in _REDIRECTS else None
        if location is None or max_redirects == 0:
            return response
        if hops >= max_redirects:
            raise HttpError("too-many-redirects", f"too many redirects (last to {location})", location)
        hops += 1
        url = urljoin(url, location)
        if response.status == 303 or (response.status <= 302 and method == "POST"):
            method, data = "GET", None


def _header_list(headers: Headers) -> List[Tuple[str, str]]:
    if headers is None:
        return []
    if isinstance(headers, dict):
        return list(headers.items())
    return list(headers)


def _split(url: str) -> Tuple[Any, str, str]:
    try:
        parts = urlsplit(url)
    except ValueError as e:
        raise HttpError("invalid-url", f"invalid URL `{url}`: {e}", url) from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise HttpError("invalid-url", f"invalid URL `{url}`: the scheme is not http or https", url)
    if not parts.netloc or "@" in parts.netloc:
        raise HttpError("invalid-url", f"invalid URL `{url}`: no host (or user info)", url)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    wit_scheme = t.Scheme_Https() if scheme == "https" else t.Scheme_Http()
    return wit_scheme, parts.netloc, path


def _send_once(method: str, url: str, headers: List[Tuple[str, str]], body: Optional[bytes]) -> Response:
    scheme, authority, path = _split(url)
    fields = t.Fields()
    for name, value in headers:
        try:
            fields.append(name, value.encode("latin-1") if isinstance(value, str) else value)
        except Err as e:
            raise HttpError("failed", f"header `{name}` refused: {type(e.value).__name__}", url) from None
    req = t.OutgoingRequest(fields)
    wit_method = _METHODS[method]() if method in _METHODS else t.Method_Other(method)
    try:
        req.set_method(wit_method)
        req.set_scheme(scheme)
        req.set_authority(authority)
        req.set_path_with_query(path)
    except Err:
        raise HttpError("invalid-url", f"invalid URL `{url}`", url) from None
    outgoing = req.body()
    try:
        pending = outgoing_handler.handle(req, None)
        if body:
            with outgoing.write() as stream:
                for i in range(0, len(body), 4096):
                    stream.blocking_write_and_flush(body[i : i + 4096])
        t.OutgoingBody.finish(outgoing, None)
    except Err as e:
        if isinstance(e.value, (streams.StreamError_Closed, streams.StreamError_LastOperationFailed)):
            raise HttpError("failed", f"writing the request body to {url} failed", url) from None
        raise HttpError._from_code(e.value, url) from None
    with pending:
        with pending.subscribe() as ready:
            ready.block()
        got = pending.get()
    if got is None or isinstance(got, Err):
        raise HttpError("failed", f"the response from {url} was not available", url)
    inner = got.value
    if isinstance(inner, Err):
        raise HttpError._from_code(inner.value, url)
    with inner.value as response:
        status = response.status()
        with response.headers() as fields:
            header_list = [(n.lower(), v) for n, v in fields.entries()]
        body_bytes = _read_body(response.consume(), url)
    return Response(status, header_list, body_bytes, url)


def _read_body(incoming: Any, url: str) -> bytes:
    chunks = []
    with incoming:
        with incoming.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(64 << 10))
                except Err as e:
                    if isinstance(e.value, streams.StreamError_Closed):
                        break
                    code = t.http_error_code(e.value.value)
                    if code is not None:
                        raise HttpError._from_code(code, url) from None
                    text = e.value.value.to_debug_string()
                    if "body size" in text:
                        raise HttpError._from_code(t.ErrorCode_HttpResponseBodySize(None), url) from None
                    raise HttpError("failed", f"reading the response from {url} failed: {text}", url) from None
    return b"".join(chunks)
