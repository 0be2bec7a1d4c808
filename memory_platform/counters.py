"""Counters and latency histograms, kept per tenant in Redis: the figures every
process adds to and the console, the stats endpoint and ``/metrics`` read.

Every process adds to the same numbers (the web workers, the task worker, the scheduler), so the
console, ``GET /api/v1/stats`` and ``GET /metrics`` read one set of figures instead of computing
three. What Postgres already knows (episodes by layer and state, bytes, tick runs, candidates) is
read from Postgres (``lifecycle.stats``); what passes and leaves no row (searches, their latency,
hits by layer, unpacks, feedback, turns ingested, requests) is counted here.

One Redis hash per scope (a tenant's primary key, or ``PLATFORM`` for what belongs to no tenant);
a field is a metric's name with its labels, ``search_ms|path=hot|le=25``. A tenant's hash carries
its hash tag, ``mp:metrics:{<tenant hex>}``, as every key of the tenant does (``key_of``); not
its documents' prefix, which its hot index covers. Histograms keep one
field per bucket (not cumulative), ``_count`` and ``_sum``. Counts are buffered in the process and
written about every second (``MEMORY["COUNTERS_FLUSH_SECONDS"]``), off the request path. Counting
fails open: a Redis outage loses counts, never a request; the hourly snapshots
(``lifecycle.models.TenantSnapshot``) keep what was read.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import secrets
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import redis

from .conf import memory_settings
from .redis_client import Client, get_redis, hash_tag, is_cluster_url

logger = logging.getLogger(__name__)

PREFIX = "mp:metrics:"
PLATFORM = "platform"
#: Upper bounds of the latency buckets, in milliseconds (the last bucket is +Inf).
LATENCY_BUCKETS_MS: tuple[float, ...] = (2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


def _field(name: str, labels: Mapping[str, object]) -> str:
    return "|".join([name, *(f"{key}={labels[key]}" for key in sorted(labels))])


def _bucket(ms: float) -> str:
    for bound in LATENCY_BUCKETS_MS:
        if ms <= bound:
            return f"{bound:g}"
    return "+Inf"


def add(scope: object, name: str, amount: int = 1, **labels: object) -> None:
    """Add ``amount`` to a counter of ``scope`` (a tenant's primary key or ``PLATFORM``)."""
    if amount:
        write(scope, counts=[(name, labels, amount)])


def observe(scope: object, name: str, ms: float, **labels: object) -> None:
    """One observation of a latency histogram, in milliseconds."""
    write(scope, observations=[(name, labels, ms)])


Labels = Mapping[str, object]


def write(
    scope: object,
    *,
    counts: Iterable[tuple[str, Labels, int]] = (),
    observations: Iterable[tuple[str, Labels, float]] = (),
) -> None:
    """Counters and observations of one scope, added to this process's buffer (written to Redis by
    its flushing thread: a search pays a dictionary update, not a round trip)."""
    key = key_of(scope)
    adds: list[tuple[str, str, float]] = []
    for name, labels, amount in counts:
        if amount:
            adds.append((key, _field(name, labels), amount))
    for name, labels, ms in observations:
        adds.append((key, _field(name, {**labels, "le": _bucket(ms)}), 1))
        adds.append((key, _field(name + "_count", labels), 1))
        adds.append((key, _field(name + "_sum", labels), round(float(ms), 3)))
    if adds:
        _buffer.add(adds)


class _Buffer:
    """Additions waiting for Redis, written every ``COUNTERS_FLUSH_SECONDS`` by a daemon thread
    (started on first use, again in a forked child) and at exit. A process that dies loses its
    last fraction of a second of counts; counts are figures, not memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # a flush returns once everything added before it is written
        self._pending: dict[tuple[str, str], float] = defaultdict(float)
        self._pid = 0
        self._wake = threading.Event()

    def add(self, adds: list[tuple[str, str, float]]) -> None:
        with self._lock:
            for key, name, amount in adds:
                self._pending[(key, name)] += amount
            if self._pid != os.getpid():  # first use in this process (or a forked child)
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="counters-flush", daemon=True).start()

    def _run(self) -> None:
        while True:
            self._wake.wait(float(memory_settings.COUNTERS_FLUSH_SECONDS))
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        with self._flush_lock:
            self._write()

    def _write(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, defaultdict(float)
        if not pending:
            return
        try:
            pipe = _client().pipeline(transaction=False)
            for (key, name), amount in pending.items():
                if name.split("|", 1)[0].endswith("_sum"):
                    pipe.hincrbyfloat(key, name, amount)
                else:
                    pipe.hincrby(key, name, int(amount))
            pipe.execute()
        except (redis.RedisError, OSError):
            logger.debug("%d counters were not written (Redis unavailable)", len(pending), exc_info=True)


_buffer = _Buffer()
atexit.register(_buffer.flush)


def flush() -> None:
    """Write this process's waiting counts now (``read`` does it first)."""
    _buffer.flush()


@dataclass
class Series:
    """One metric of one scope: its values by label set (a tuple of (label, value) pairs)."""

    values: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)

    def total(self, **match: str) -> float:
        return sum(v for labels, v in self.values.items() if match.items() <= dict(labels).items())


def read(scopes: Iterable[object]) -> dict[str, dict[str, Series]]:
    """Every counter of each scope, by metric name (one Redis round trip for all of them, after
    this process's waiting counts are written); empty when Redis is unavailable."""
    flush()
    names = [str(s) for s in scopes]
    out: dict[str, dict[str, Series]] = {name: {} for name in names}
    try:
        pipe = _client().pipeline(transaction=False)
        for name in names:
            pipe.hgetall(key_of(name))
        replies = pipe.execute()
    except (redis.RedisError, OSError):
        logger.warning("counters unavailable (Redis)", exc_info=True)
        return out
    for scope, reply in zip(names, replies, strict=True):
        for raw_field, raw_value in reply.items():
            name, *pairs = (raw_field.decode() if isinstance(raw_field, bytes) else raw_field).split("|")
            labels = tuple(tuple(pair.split("=", 1)) for pair in pairs)
            series = out[scope].setdefault(name, Series())
            series.values[labels] = float(raw_value)  # type: ignore[index]
    return out


def total(metrics: Mapping[str, Series], name: str, **match: str) -> float:
    """A counter's sum over the label sets that ``match`` (0 when it was never counted)."""
    return metrics[name].total(**match) if name in metrics else 0.0


@dataclass(frozen=True)
class Histogram:
    """A latency histogram read back: per-bucket counts, count and sum (ms)."""

    buckets: dict[str, float]
    count: float
    sum: float

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the ``q`` quantile (None without observations)."""
        if not self.count:
            return None
        seen = 0.0
        for bound in [*(f"{b:g}" for b in LATENCY_BUCKETS_MS), "+Inf"]:
            seen += self.buckets.get(bound, 0.0)
            if seen >= q * self.count:
                return math.inf if bound == "+Inf" else float(bound)
        return math.inf


def histograms(metrics: Mapping[str, Series], name: str) -> dict[tuple[tuple[str, str], ...], Histogram]:
    """A histogram per label set (without ``le``)."""
    out: dict[tuple[tuple[str, str], ...], Histogram] = {}
    sums = metrics.get(name + "_sum", Series()).values
    for labels, count in metrics.get(name + "_count", Series()).values.items():
        out[labels] = Histogram({}, count, sums.get(labels, 0.0))
    for labels, value in metrics.get(name, Series()).values.items():
        le = dict(labels)["le"]
        rest = tuple(pair for pair in labels if pair[0] != "le")
        if rest in out:
            out[rest].buckets[le] = out[rest].buckets.get(le, 0.0) + value
    return out


def histogram(metrics: Mapping[str, Series], name: str, **match: str) -> Histogram:
    buckets: dict[str, float] = {}
    for labels, value in metrics.get(name, Series()).values.items():
        as_dict = dict(labels)
        if match.items() <= as_dict.items():
            buckets[as_dict["le"]] = buckets.get(as_dict["le"], 0.0) + value
    return Histogram(
        buckets, total(metrics, name + "_count", **match), total(metrics, name + "_sum", **match)
    )


def fields_of(scope: object) -> dict[str, str]:
    """The raw fields of one scope's hash (an export carries them); empty when there are none."""
    flush()
    reply = _client().hgetall(key_of(scope))
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in reply.items()
    }


def add_fields(scope: object, fields: Mapping[str, str]) -> None:
    """Add raw fields (``fields_of`` of an export) to a scope: counts add up, as counting does."""
    if not fields:
        return
    pipe = _client().pipeline(transaction=False)
    for name, value in fields.items():
        if name.split("|", 1)[0].endswith("_sum"):
            pipe.hincrbyfloat(key_of(scope), name, float(value))
        else:
            pipe.hincrby(key_of(scope), name, int(float(value)))
    pipe.execute()


def erase(scope: object) -> int:
    """Remove a scope's counters for good (a tenant's data erasure); returns the keys removed."""
    flush()
    return int(_client().delete(key_of(scope)))


def exists(scope: object) -> bool:
    """Whether Redis holds counters of ``scope``."""
    return bool(_client().exists(key_of(scope)))


def key_of(scope: object) -> str:
    """The Redis key that holds a scope's counters (an erasure's verification looks for it): a
    tenant's (its primary key, or ``<name>:<its primary key>``) under its hash tag, so that on a
    Redis Cluster they live with its other keys; others under ``PREFIX``."""
    name, _, last = str(scope).rpartition(":")
    try:
        tenant = uuid.UUID(last)
    except ValueError:
        return PREFIX + str(scope)
    return PREFIX + (f"{name}:" if name else "") + hash_tag(tenant.hex)


#: Set once the counters of every tenant are under its hash tag (``_adopt_untagged``).
TAGGED_MARKER = "mp:meta:metrics-tagged"
_adopted = threading.Event()


def _client() -> Client:
    """The Redis client, once this deployment's counters written before the hash tag are moved
    under it (the first use in each process looks)."""
    client = get_redis()
    if not _adopted.is_set():
        _adopt_untagged(client)
        _adopted.set()
    return client


def _adopt_untagged(client: Client) -> None:
    """Add each tenant's counters written under ``mp:metrics:<scope>`` (before they carried the
    hash tag) into ``key_of(scope)``, once per deployment (``TAGGED_MARKER``). Each old hash is
    renamed to a key of this process's first, so that two processes cannot both add it. A cluster
    never held them: this version is the first to run on one."""
    from django.conf import settings

    if is_cluster_url(settings.REDIS_URL) or client.exists(TAGGED_MARKER):
        return
    for raw in client.scan_iter(match=PREFIX + "*", count=1000):
        old = raw.decode() if isinstance(raw, bytes) else raw
        new = key_of(old[len(PREFIX) :])
        if new == old:
            continue
        claimed = f"mp:meta:metrics-adopting:{secrets.token_hex(8)}"
        try:
            client.rename(old, claimed)
        except redis.ResponseError:
            continue  # another process took it
        pipe = client.pipeline(transaction=False)
        for field_name, value in client.hgetall(claimed).items():
            name = field_name.decode() if isinstance(field_name, bytes) else field_name
            if name.split("|", 1)[0].endswith("_sum"):
                pipe.hincrbyfloat(new, name, float(value))
            else:
                pipe.hincrby(new, name, int(float(value)))
        pipe.delete(claimed)
        pipe.execute()
    client.set(TAGGED_MARKER, "1")
