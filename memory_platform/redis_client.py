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

``REDIS_URL=redis+cluster://[[user]:password@]host:port[,host:port...]`` (``rediss+cluster://`` over
TLS) makes both clients redis-py's ``RedisCluster``: each node its own pool and circuit, so a lost
master fails its own tenants' calls at once and nobody else's. Every key of a tenant carries its
hash tag, so its keys share one slot; a command that names no key of its own, or whose key
redis-py does not route by (RediSearch's index names), is sent to the master of a key's slot with
``on_owner_of`` (docs/decisions/0052-hot-tier-on-redis-cluster.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster, merge_result
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
    exchange went (a server's error reply, such as a syntax error, is an answer: a success).

    One call asks once: what it does inside (connecting sends AUTH, HELLO and CLIENT SETINFO; a
    send may connect first, or check the connection's health) is part of it. Asking again there
    would refuse the probe's own handshake, and a circuit whose probes need a new connection (the
    old ones dropped: Redis restarted, or timed out while paused) would never close."""

    circuit: Circuit
    _in_call = False

    def __init__(self, *args: Any, circuit: Circuit | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # A cluster's nodes are learnt as it answers: each node's connections share the circuit
        # of its address.
        self.circuit = circuit or circuit_for(f"{self.host}:{self.port}")  # type: ignore[attr-defined]

    def _asked(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._in_call:
            return call(*args, **kwargs)
        self.circuit.before()
        self._in_call = True
        try:
            return call(*args, **kwargs)
        except _NETWORK_ERRORS as exc:
            if not isinstance(exc, CircuitOpen):
                self.circuit.failed()
            raise
        finally:
            self._in_call = False

    def connect_check_health(self, *args: Any, **kwargs: Any) -> Any:
        return self._asked(super().connect_check_health, *args, **kwargs)  # type: ignore[misc]

    def send_packed_command(self, *args: Any, **kwargs: Any) -> Any:
        return self._asked(super().send_packed_command, *args, **kwargs)  # type: ignore[misc]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = super().read_response(*args, **kwargs)  # type: ignore[misc]
        except _NETWORK_ERRORS:
            if not self._in_call:  # else the call it is part of counts it
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


#: A client of one server, or of a cluster (``REDIS_URL=redis+cluster://...``).
Client = redis.Redis | RedisCluster

CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}  # scheme: over TLS

_circuits: dict[str, Circuit] = {}
_clients: dict[tuple[str, bool], Client] = {}


def circuit_for(url: str) -> Circuit:
    """The circuit of the server at ``url`` (one per process, shared by its clients)."""
    if url not in _circuits:
        _circuits[url] = Circuit()
    return _circuits[url]


@dataclass(frozen=True)
class ClusterAddress:
    """What a ``redis+cluster://`` URL says: the nodes to start from (any of the cluster's; the
    rest are learnt from them), the credentials every node takes, TLS or not."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    tls: bool

    @classmethod
    def parse(cls, url: str) -> ClusterAddress:
        """``redis+cluster://[[user]:password@]host:port[,host:port...][/0]``; a ``ValueError``
        says what is wrong. (A cluster has database 0 only.)"""
        scheme, sep, rest = url.partition("://")
        if not sep or scheme.lower() not in CLUSTER_SCHEMES:
            raise ValueError(f"a cluster URL starts with redis+cluster:// or rediss+cluster:// (got {url!r})")
        netloc, _, path = rest.partition("/")
        if path.split("?", 1)[0] not in ("", "0"):
            raise ValueError(f"a Redis Cluster has database 0 only (got /{path} in the URL)")
        userinfo, at, hosts = netloc.rpartition("@")
        username = password = None
        if at:
            user, colon, secret = userinfo.partition(":")
            username, password = (unquote(user) or None), (unquote(secret) if colon else None)
        nodes = []
        for node in hosts.split(","):
            host, colon, port = node.strip().rpartition(":")
            if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"each node of a cluster URL is host:port (got {node!r} in {url!r})")
            nodes.append((host.strip("[]"), int(port)))
        return cls(tuple(nodes), username, password, CLUSTER_SCHEMES[scheme.lower()])


def hash_tag(tenant_hex: str) -> str:
    """What every key of a tenant carries: a Redis Cluster hashes only the part between the first
    braces, so all the tenant's keys share one slot (docs/concepts.md#where-things-live)."""
    return f"{{{tenant_hex}}}"


def tenant_tag(tenant_hex: str) -> str:
    """The start of the keys of a tenant's hot documents (its index covers this prefix)."""
    return f"mp:{hash_tag(tenant_hex)}"


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES


def get_redis(*, quick: bool = False) -> Client:
    """The client of this process for ``settings.REDIS_URL``: ``quick`` for calls a request waits
    on (their socket timeout is ``MEMORY["REDIS_QUICK_TIMEOUT"]`` seconds), else for background
    work (5 s)."""
    url = settings.REDIS_URL
    client = _clients.get((url, quick))
    if client is None:
        timeout = float(memory_settings.REDIS_QUICK_TIMEOUT) if quick else 5.0
        client = _cluster_client(url, timeout) if is_cluster_url(url) else _server_client(url, timeout)
        _clients[(url, quick)] = client
    return client


def _server_client(url: str, timeout: float) -> redis.Redis:
    pool = redis.ConnectionPool.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=min(timeout, 2.0),
        health_check_interval=30,
        retry=Retry(NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,)),
        circuit=circuit_for(url),
    )
    pool.connection_class = _guarded(pool.connection_class)
    return redis.Redis(connection_pool=pool)


def _cluster_client(url: str, timeout: float) -> RedisCluster:
    """A ``RedisCluster`` that follows MOVED and ASK (a slot moved by resharding or a failover) and
    tries a failed call once more, at once, after reading the cluster's slots again."""
    address = ClusterAddress.parse(url)
    (host, port), *others = address.nodes
    # Built from a URL, redis-py gives each node a pool of ``connection_class`` (the circuit's);
    # the class, not the scheme, says TLS.
    userinfo = f"{quote(address.username or '', safe='')}:{quote(address.password or '', safe='')}@"
    client = RedisCluster(
        url=f"redis://{userinfo if address.username or address.password else ''}{host}:{port}/0",
        startup_nodes=[ClusterNode(h, p) for h, p in others],
        connection_class=_guarded(redis.SSLConnection if address.tls else redis.Connection),
        socket_timeout=timeout,
        socket_connect_timeout=min(timeout, 2.0),
        retry=Retry(NoBackoff(), 1),
    )
    # FT._LIST names no key, and each master lists its own indexes: asked of every master, the
    # names merged (redis-py would ask a random one).
    client.command_flags["FT._LIST"] = RedisCluster.PRIMARIES
    client.result_callbacks["FT._LIST"] = merge_result
    return client


def on_owner_of(client: Client, key: str) -> dict[str, Any]:
    """The options that send a command to the master of ``key``'s slot on a cluster (none on one
    server). For commands redis-py would send to a random master: those naming no key (``FT.DEBUG``)
    and RediSearch's, whose first argument, the index name, is the key the server routes by but
    redis-py does not (the random master would answer MOVED, and every fifth MOVED makes redis-py
    read the whole cluster's slots again). A MOVED or ASK still comes when the slot has just moved,
    and is followed."""
    if isinstance(client, RedisCluster):
        return {"target_nodes": client.get_node_from_key(key)}
    return {}


def servers(client: Client) -> list[redis.Redis]:
    """A client of each master: the one server, or each master of a cluster (for what each holds
    apart: its index names, its memory, its collector's settings)."""
    if isinstance(client, RedisCluster):
        return [client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


def reset() -> None:
    """Start afresh with a server just (re)started by this process: every pool's connections are
    dropped and every circuit closed."""
    for client in _clients.values():
        if isinstance(client, RedisCluster):
            client.disconnect_connection_pools()
        else:
            client.connection_pool.disconnect()
    for circuit in _circuits.values():
        circuit.close()


def info_field(info: Any, name: str, default: Any = None) -> Any:
    """A field of a RediSearch reply (``FT.INFO``, ``FT.SEARCH``'s maps): a map (RESP3) or a flat
    list of pairs (RESP2), with bytes keys (or str with ``decode_responses``)."""
    mapping = info if isinstance(info, dict) else dict(zip(info[::2], info[1::2], strict=False))
    value = mapping.get(name.encode())
    return mapping.get(name, default) if value is None else value


def refusing_writes(client: Client) -> str:
    """Why this Redis refuses writes now ("" when it takes them): full under ``noeviction``, or
    unreachable; on a cluster, the first master that is. Ingest then leaves its episodes for the
    repair, and search and ``/readyz`` say so."""
    try:
        nodes = servers(client)
    except (redis.RedisError, OSError) as exc:
        return f"Redis is unavailable ({type(exc).__name__}: {exc})"
    for node in nodes:
        where = f" at {_address(node)}" if len(nodes) > 1 else ""
        try:
            memory = node.info("memory")
        except (redis.RedisError, OSError) as exc:
            return f"Redis{where} is unavailable ({type(exc).__name__}: {exc})"
        limit, used = int(memory.get("maxmemory", 0)), int(memory.get("used_memory", 0))
        policy = memory.get("maxmemory_policy", b"")
        policy = policy.decode() if isinstance(policy, bytes) else policy
        if limit and used >= limit and policy == "noeviction":
            return f"Redis{where} is full ({used} of {limit} bytes, noeviction): it refuses writes"
    return ""


def _address(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host')}:{kwargs.get('port')}"
