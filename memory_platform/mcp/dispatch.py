"""The REST API called in process: a request built as a WSGI server would build it and answered
by Django's handler with its whole middleware, as if it had come over the network."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler

from memory_platform import db

API = "/api/v1"
_handler: WSGIHandler | None = None
# Tool calls wait here for the API, on threads that live as long as the process: each keeps its
# database connection between calls (CONN_MAX_AGE), known to ``db.close_worker_connections``.
_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="mcp-call")


def _wsgi() -> WSGIHandler:
    global _handler
    if _handler is None:
        _handler = WSGIHandler()
    return _handler


class ApiError(Exception):
    """The API answered 4xx or 5xx: ``message`` is its error envelope's, in one line."""

    def __init__(self, status: int, body: Any, retry_after: str | None = None):
        self.status = status
        self.body = body
        wait = f" (retry after {retry_after} s)" if retry_after else ""
        super().__init__(f"{status}: {_message(body)}{wait}")


def _message(body: Any) -> str:
    if not isinstance(body, dict):
        return str(body)[:500]
    error = body.get("error", body)
    if not isinstance(error, dict):
        return str(error)[:500]
    text = str(error.get("message") or error.get("detail") or "")
    details = error.get("details")
    return f"{text} {json.dumps(details)}" if details else text


def local_host() -> str:
    """A name ALLOWED_HOSTS accepts, for calls that came in over no HTTP request (stdio)."""
    for host in settings.ALLOWED_HOSTS:
        if host == "*":
            return "localhost"
        if host:
            return host.lstrip(".")
    return "localhost"


@dataclass(frozen=True)
class Caller:
    """Who calls the API, and how the calls look to it: the key and the original request's host,
    scheme and address (so that ALLOWED_HOSTS, HTTPS redirects and per-address limits hold)."""

    authorization: str
    host: str
    scheme: str = "http"
    remote_addr: str = "127.0.0.1"
    forwarded_proto: str | None = None

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        """The API's JSON answer to ``method API+path``. Raises ApiError for a 4xx or 5xx."""
        payload = b"" if body is None else json.dumps(body, default=str).encode()
        name, _, port = self.host.rpartition(":") if self.host.count(":") == 1 else (self.host, "", "")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": API + path,
            "QUERY_STRING": urlencode(params or {}, doseq=True),
            "SERVER_NAME": name or self.host,
            "SERVER_PORT": port or ("443" if self.scheme == "https" else "80"),
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": self.host,
            "HTTP_ACCEPT": "application/json",
            "HTTP_AUTHORIZATION": self.authorization,
            "REMOTE_ADDR": self.remote_addr,
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(payload)),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": self.scheme,
            "wsgi.input": io.BytesIO(payload),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        if self.forwarded_proto:
            environ["HTTP_X_FORWARDED_PROTO"] = self.forwarded_proto
        status, headers, content = _respond(environ)
        try:
            answer = json.loads(content) if content else None
        except ValueError:
            answer = content.decode("utf-8", "replace")
        if status >= 400:
            raise ApiError(status, answer, headers.get("Retry-After"))
        return answer

    async def request(
        self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """``call``, from a coroutine: on one of the pool's threads."""
        future = _pool.submit(db.in_worker, self.call, method, path, body, params)
        return await asyncio.wrap_future(future)


def _respond(environ: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    started: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started.append((status, headers))

    response = _wsgi()(environ, start_response)
    try:
        content = b"".join(response)
    finally:
        response.close()  # request_finished, as after any request
    status, headers = started[0]
    return int(status.split()[0]), dict(headers), content
