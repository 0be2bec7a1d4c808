"""Calling an OpenAI-compatible HTTP server (chat completions for the LLM summariser, embeddings
for the ``openai`` embedder): one POST of JSON, its errors sorted into those a retry can cure and
those it cannot.

The standard library's ``urllib`` is enough for one JSON POST; no client library is needed.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError

#: HTTP statuses a retry can cure: the server is busy, rate-limits, or failed for now.
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class RemoteError(Exception):
    """The server did not give a usable answer. ``retryable``: trying again later can help
    (unreachable, timed out, busy); otherwise the request itself is wrong (bad key, unknown model,
    a malformed answer) and must be fixed first. ``status`` is the HTTP status, if one came."""

    def __init__(self, message: str, *, retryable: bool, status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status = status


def validate_base_url(value: str) -> None:
    # URLValidator refuses single-label hosts, and an in-cluster service name ("http://llm:8000") is normal.
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(f"the base URL must be an http(s) URL with a host (got {value!r}).")


def post_json(
    base_url: str, path: str, body: dict[str, Any], *, api_key: str, timeout: float, max_bytes: int
) -> Any:
    """POST ``body`` to ``<base_url>/<path>`` and return the decoded JSON answer.

    Raises ``RemoteError``: retryable for a refused or dropped connection, a timeout and the
    statuses in ``RETRYABLE_STATUSES``; not retryable for other 4xx statuses and for an answer
    that is not JSON."""
    url = f"{base_url.rstrip('/')}/{path.lstrip('/')}"
    if urlsplit(url).scheme not in ("http", "https"):
        raise RemoteError(f"not an http(s) URL: {url!r}", retryable=False)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked above
        url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            raw = response.read(max_bytes + 1)
    except urllib.error.HTTPError as exc:
        detail = _detail(exc)
        raise RemoteError(
            f"{url} answered {exc.code}{': ' + detail if detail else ''}",
            retryable=exc.code in RETRYABLE_STATUSES,
            status=exc.code,
        ) from None
    except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, cut short
        reason = getattr(exc, "reason", exc)
        raise RemoteError(f"{url} cannot be reached: {reason}", retryable=True) from None
    if len(raw) > max_bytes:
        raise RemoteError(f"{url} answered more than {max_bytes} bytes", retryable=False)
    try:
        return json.loads(raw)
    except ValueError:
        raise RemoteError(f"{url} did not answer JSON", retryable=False) from None


def _detail(exc: urllib.error.HTTPError) -> str:
    """The error message of an OpenAI-style error body ({"error": {"message": ...}}), shortened."""
    try:
        payload = json.loads(exc.read(4096))
        error = payload.get("error", payload) if isinstance(payload, dict) else payload
        message = error.get("message", "") if isinstance(error, dict) else str(error)
    except Exception:
        return ""
    return " ".join(str(message).split())[:200]
