"""One Redis connection pool per process and purpose, built from ``settings.REDIS_URL``, behind a
circuit breaker shared by the pools of one server.

Two clients: ``get_redis()`` for work that may take a while (indexing a batch, a rebuild), and
``get_redis(quick=True)`` for the calls a request waits on (searches, rate limits), whose socket
timeout is ``MEMORY["REDIS_QUICK_TIMEOUT"]``. Neither retries with back-off: one stale pooled
connection (after a Redis restart) is tried again at once, and that is all.

When Redis stops answering, the circuit opens after ``Circuit.failures`` network failures in a row
(refused, reset, timed out): every call then fails at once with ``CircuitOpen`` (a
``redis.ConnectionError``, which callers already treat as an outage) instead of each request
waiting for a socket timeout. Every ``Circuit.open_seconds`` one call goes through as a probe; its
answer closes the circuit (docs/decisions/0037-queries-that-cannot-stall-the-engines.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from memory_platform.conf import memory_settings


class CircuitOpen(redis.exceptions.ConnectionError):
    """Redis failed just now: the call was not tried (see ``Circuit``)."""


class Circuit:
    """Opens after ``failures`` network failures in a row; while open every call fails at once,
    but one call every ``open_seconds`` (the probe), whose success closes it. ``clock`` is the time
    (monotonic seconds), an input so that tests can move it."""

    def __init__(
        self, *, failures: int = 3, open_seconds: float = 2.0, clock: Callable[[], float] = time.monotonic
    ):
        self.failures, self.open_seconds, self.clock = failures, open_seconds, clock
        self._lock = threading.Lock()
        self._failed = 0
        self._retry_at: float | None = None  # None: closed

    @property
    def is_open(self) -> bool:
        return self._retry_at is not None

    def before(self) -> None:
        """Let a call through, or raise ``CircuitOpen`` when the circuit is open and no probe is due."""
        if self._retry_at is None:
            return
        with self._lock:
            now = self.clock()
            if self._retry_at is not None and now < self._retry_at:
                raise CircuitOpen(
                    f"Redis failed {self._failed} time(s) in a row; calls fail at once for "
                    f"{self._retry_at - now:.1f} s more, then one is tried"
                )
            if self._retry_at is not None:
                self._retry_at = now + self.open_seconds  # this call is the probe; others wait for it

    def failed(self) -> None:
        with self._lock:
            self._failed += 1
            if self._failed >= self.failures:
                self._retry_at = self.clock() + self.open_seconds

    def succeeded(self) -> None:
        if self._failed or self._retry_at is not None:
            self.close()

    def close(self) -> None:
        with self._lock:
            self._failed, self._retry_at = 0, None


_NETWORK_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


class _Guarded:
    """A connection that asks its circuit before it connects or sends, and tells it how each
    exchange went (a server's error reply, such as a syntax error, is an answer: a success)."""

    circuit: Circuit

    def __init__(self, *args: Any, circuit: Circuit, **kwargs: Any):
        self.circuit = circuit
        super().__init__(*args, **kwargs)

    def _asked(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.circuit.before()
        try:
            return call(*args, **kwargs)
        except _NETWORK_ERRORS as exc:
            if not isinstance(exc, CircuitOpen):
                self.circuit.failed()
            raise

    def connect_check_health(self, *args: Any, **kwargs: Any) -> Any:
        return self._asked(super().connect_check_health, *args, **kwargs)  # type: ignore[misc]

    def send_packed_command(self, *args: Any, **kwargs: Any) -> Any:
        return self._asked(super().send_packed_command, *args, **kwargs)  # type: ignore[misc]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = super().read_response(*args, **kwargs)  # type: ignore[misc]
        except _NETWORK_ERRORS:
            self.circuit.failed()
            raise
        except redis.exceptions.ResponseError:
            self.circuit.succeeded()
            raise
        self.circuit.succeeded()
        return response


_guarded_classes: dict[type, type] = {}


def _guarded(connection_class: type) -> type:
    """``connection_class`` (plain, TLS or Unix socket, as the URL says) with ``_Guarded``."""
    if connection_class not in _guarded_classes:
        _guarded_classes[connection_class] = type(
            f"Guarded{connection_class.__name__}", (_Guarded, connection_class), {}
        )
    return _guarded_classes[connection_class]


_circuits: dict[str, Circuit] = {}
_clients: dict[tuple[str, bool], redis.Redis] = {}


def circuit_for(url: str) -> Circuit:
    """The circuit of the server at ``url`` (one per process, shared by its clients)."""
    if url not in _circuits:
        _circuits[url] = Circuit()
    return _circuits[url]


def get_redis(*, quick: bool = False) -> redis.Redis:
    """The client of this process for ``settings.REDIS_URL``: ``quick`` for calls a request waits
    on (their socket timeout is ``MEMORY["REDIS_QUICK_TIMEOUT"]`` seconds), else for background
    work (5 s)."""
    url = settings.REDIS_URL
    client = _clients.get((url, quick))
    if client is None:
        timeout = float(memory_settings.REDIS_QUICK_TIMEOUT) if quick else 5.0
        pool = redis.ConnectionPool.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=min(timeout, 2.0),
            health_check_interval=30,
            retry=Retry(NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,)),
            circuit=circuit_for(url),
        )
        pool.connection_class = _guarded(pool.connection_class)
        client = redis.Redis(connection_pool=pool)
        _clients[(url, quick)] = client
    return client


def reset() -> None:
    """Start afresh with a server just (re)started by this process: every pool's connections are
    dropped and every circuit closed."""
    for client in _clients.values():
        client.connection_pool.disconnect()
    for circuit in _circuits.values():
        circuit.close()


def info_field(info: Any, name: str, default: Any = None) -> Any:
    """A field of a RediSearch reply (``FT.INFO``, ``FT.SEARCH``'s maps): a map (RESP3) or a flat
    list of pairs (RESP2), with bytes keys (or str with ``decode_responses``)."""
    mapping = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=False))
    value = mapping.get(name.encode())
    return mapping.get(name, default) if value is None else value


def refusing_writes(client: redis.Redis) -> str:
    """Why this Redis refuses writes now ("" when it takes them): full under ``noeviction``, or
    unreachable. Ingest then leaves its episodes for the repair, and search and ``/readyz`` say so."""
    try:
        memory = client.info("memory")
    except (redis.RedisError, OSError) as exc:
        return f"Redis is unavailable ({type(exc).__name__}: {exc})"
    limit, used = int(memory.get("maxmemory", 0)), int(memory.get("used_memory", 0))
    policy = memory.get("maxmemory_policy", b"")
    policy = policy.decode() if isinstance(policy, bytes) else policy
    if limit and used >= limit and policy == "noeviction":
        return f"Redis is full ({used} of {limit} bytes, noeviction): it refuses writes"
    return ""
