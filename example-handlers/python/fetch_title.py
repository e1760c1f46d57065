"""Fetches ``{"url": "..."}`` with the SDK's HTTP helper (the URL's origin
must be in ``capabilities.http``) and returns ``{"title", "status", "url"}``.
A refused origin fails the job terminally; other HTTP failures retry.
"""

import re

from boxcar_guest import Retry, Terminal, WitWorld, handler, http, info  # noqa: F401

_TITLE = re.compile(r"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)


@handler
def handle(job):
    url = job.payload.get("url")
    if not isinstance(url, str):
        raise Terminal("fetch_title: payload.url must be a string", code="invalid-payload")
    try:
        page = http.get(url)
    except http.HttpError as e:
        if e.kind in ("denied", "invalid-url"):
            raise Terminal(e.message, code="http-refused") from None
        raise Retry(e.message) from None
    info(f"{page.url} answered {page.status}")
    found = _TITLE.search(page.text())
    title = " ".join(found.group(1).split()) if found else None
    return {"title": title, "status": page.status, "url": page.url}
