"""Streamable HTTP at ``/mcp`` on the platform's own web server.

The web server speaks WSGI (gunicorn's threads) and the SDK's transport ASGI, so each process
runs one event loop on a thread of its own, where the transport lives, and ``McpView`` hands it
each request and waits for the answer. The transport is stateless and answers in JSON (one POST,
one response; no session, no event stream): a request never holds a web thread longer than its
tool call. The view is an API view: the key is checked, and names the tenant, before the
transport sees the request; each tool then calls the API with that same key.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import MutableMapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.request import Request

from memory_platform.api.base import TenantAPIView
from memory_platform.client_address import client_address

from .dispatch import Caller
from .tools import build_server

# Below gunicorn's 120 s worker timeout: a stuck call is answered, not killed with its worker.
CALL_TIMEOUT_SECONDS = 100.0
# Hop-by-hop or recomputed by Django: not copied from the transport's answer.
_DROPPED_HEADERS = ("content-length", "transfer-encoding", "connection")


def _caller(ctx: Context) -> Caller:
    """The request the transport is answering: its key, host, scheme and address."""
    request = ctx.request_context.request
    assert request is not None, "an HTTP tool call carries its request"
    headers = request.headers
    return Caller(
        authorization=headers["authorization"],
        host=headers["host"],
        scheme=request.url.scheme,
        remote_addr=request.client.host if request.client else "127.0.0.1",
        forwarded_proto=headers.get("x-forwarded-proto"),
    )


class _Transport:
    """This process's event loop thread and the SDK's session manager running on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._manager: StreamableHTTPSessionManager | None = None

    def _started(self) -> tuple[asyncio.AbstractEventLoop, StreamableHTTPSessionManager]:
        with self._lock:
            # gunicorn forks after loading the app: a thread started before the fork is not here.
            if self._loop is None or self._manager is None or self._pid != os.getpid():
                server = build_server(_caller)
                # ALLOWED_HOSTS has checked the Host header already, and every call needs a key.
                server.streamable_http_app(
                    json_response=True,
                    stateless_http=True,
                    transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
                )
                manager = server.session_manager
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="mcp-transport", daemon=True).start()
                ready = threading.Event()
                asyncio.run_coroutine_threadsafe(_hold(manager, ready), loop)
                if not ready.wait(timeout=30):
                    raise RuntimeError("the MCP transport did not start within 30 s")
                self._pid, self._loop, self._manager = os.getpid(), loop, manager
            return self._loop, self._manager

    def exchange(self, scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        loop, manager = self._started()
        future = asyncio.run_coroutine_threadsafe(_exchange(manager, scope, body), loop)
        try:
            return future.result(timeout=CALL_TIMEOUT_SECONDS)
        except FutureTimeout:
            future.cancel()
            raise


async def _hold(manager: StreamableHTTPSessionManager, ready: threading.Event) -> None:
    """Keep the manager's task group open for the life of the process."""
    async with manager.run():
        ready.set()
        await asyncio.Event().wait()


async def _exchange(
    manager: StreamableHTTPSessionManager, scope: dict[str, Any], body: bytes
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    answered = asyncio.Event()
    start: dict[str, Any] = {}
    chunks: list[bytes] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                answered.set()

    await manager.handle_request(scope, receive, send)
    return int(start["status"]), list(start.get("headers", [])), b"".join(chunks)


transport = _Transport()


def _scope(request: Request) -> dict[str, Any]:
    meta = request.META
    headers = [
        (name[5:].replace("_", "-").lower().encode("latin-1"), str(value).encode("latin-1"))
        for name, value in meta.items()
        if name.startswith("HTTP_")
    ]
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if meta.get(name):
            headers.append((name.replace("_", "-").lower().encode(), str(meta[name]).encode("latin-1")))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "root_path": "",
        "query_string": meta.get("QUERY_STRING", "").encode("latin-1"),
        "headers": headers,
        # The client as the API's throttles name it (through trusted proxies): the tools' calls
        # carry it as their address, so a proxy's clients are counted apart there too.
        "client": (client_address(meta), 0),
        "server": (request.get_host().rsplit(":", 1)[0], int(request.get_port())),
    }


@extend_schema(exclude=True)
class McpView(TenantAPIView):
    """POST /mcp: one MCP message in, its answer out, errors in JSON. (No GET event stream: the
    transport is stateless, which the protocol lets a server say with a 405.)"""

    required_scope = "read"
    # Each tool call is one API call, limited there; counting the envelope too would halve the rate.
    throttle_classes = ()

    def post(self, request: Request) -> HttpResponse:
        # An MCP message is JSON. The transport would refuse another body in plain text; refused
        # here, it is the API's 415 in the error envelope, as every other refusal of this view.
        if request.content_type.split(";")[0].strip().lower() != "application/json":
            raise UnsupportedMediaType(request.content_type or "none")
        status, headers, body = transport.exchange(_scope(request), request.body)
        response = HttpResponse(body, status=status)
        for name, value in headers:
            if name.decode("latin-1").lower() not in _DROPPED_HEADERS:
                response[name.decode("latin-1")] = value.decode("latin-1")
        return response
