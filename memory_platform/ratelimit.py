"""Rate limits: fixed-window counters in Redis, shared by every server process.

Limits are written ``N/s`` or ``N/min``. Each API key may make ``MEMORY_RATE_LIMIT`` requests (a
tenant's ``rate_limit`` overrides it for its keys), a tenant's keys together
``MEMORY_TENANT_RATE_LIMIT``; failed logins are limited by ``tenancy.login_throttle``. Over a limit
the answer is 429 with ``Retry-After``.

While Redis cannot be reached, each process counts the same windows in its own memory
(``LocalWindows``): the limits then hold per process rather than across them, but they hold. An
outage must not be the moment the failed-login limit is off (docs/decisions/0036).
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import redis

from memory_platform.redis_client import Client, get_redis, hash_tag

logger = logging.getLogger(__name__)

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(s|sec|second|m|min|minute)\s*$")


@dataclass(frozen=True)
class Rate:
    count: int
    seconds: int

    @classmethod
    def parse(cls, text: str) -> Rate:
        match = _RATE.match(text or "")
        if match is None or int(match.group(1)) < 1:
            raise ValueError(f"a rate is written N/s or N/min with N at least 1 (got {text!r})")
        return cls(int(match.group(1)), 1 if match.group(2).startswith("s") else 60)

    def __str__(self) -> str:
        return f"{self.count}/{'s' if self.seconds == 1 else 'min'}"


@dataclass(frozen=True)
class _Window:
    key: str
    rate: Rate
    number: int

    @classmethod
    def of(cls, bucket: str, rate: Rate, now: float, tenant: object = None) -> _Window:
        """A tenant's windows carry its hash tag, as every key of the tenant does (on a Redis
        Cluster they live with its other keys); the others (failed logins by address) do not."""
        number = int(now // rate.seconds)
        tag = f"{hash_tag(uuid.UUID(str(tenant)).hex)}:" if tenant is not None else ""
        return cls(f"mp:rl:{tag}{bucket}:{rate.seconds}:{number}", rate, number)

    @property
    def ends(self) -> float:
        return (self.number + 1) * self.rate.seconds

    def wait(self, now: float) -> float:
        return max(0.001, self.ends - now)


class LocalWindows:
    """The windows' counts in this process, while Redis is unreachable.

    At most ``size`` windows are kept; past it the least recently counted goes. A client over its
    limit counts on every request, so its window stays; what goes is a window nobody is using, or
    one of the many an attacker opens with fresh names. A window's count lives until it ends.
    """

    def __init__(self, size: int):
        self.size = size
        self._counts: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._counts)

    def _count(self, window: _Window, now: float) -> int:
        entry = self._counts.get(window.key)
        return entry[0] if entry is not None and entry[1] > now else 0

    def incr(self, windows: list[_Window], now: float) -> list[int]:
        with self._lock:
            counts = []
            for window in windows:
                count = self._count(window, now) + 1
                self._counts[window.key] = (count, window.ends)
                self._counts.move_to_end(window.key)
                counts.append(count)
            while len(self._counts) > self.size:
                self._counts.popitem(last=False)
            return counts

    def get(self, windows: list[_Window], now: float) -> list[int]:
        with self._lock:
            return [self._count(window, now) for window in windows]

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()


# 20,000 windows hold a few megabytes; each client over a limit needs one to three of them.
local_windows = LocalWindows(size=20_000)
_outage = threading.Event()


def _redis_lost(exc: BaseException) -> None:
    """Say once, not per request, that counting moved into the process."""
    if not _outage.is_set():
        _outage.set()
        logger.warning(
            "Redis unreachable (%s: %s): rate limits and failed logins are counted in this process "
            "until it answers again",
            type(exc).__name__,
            exc,
        )


def _redis_back() -> None:
    if _outage.is_set():
        _outage.clear()
        local_windows.clear()
        logger.info("Redis answers again: rate limits are counted there, shared by every process")


def _waits(windows: list[_Window], counts: list[int], now: float, *, at_least: int) -> float | None:
    waits = [
        window.wait(now)
        for window, count in zip(windows, counts, strict=True)
        if count >= window.rate.count + at_least
    ]
    return max(waits) if waits else None


def _counts(
    windows: list[_Window],
    now: float,
    in_redis: Callable[[Client], list[int]],
    locally: Callable[[list[_Window], float], list[int]],
) -> list[int]:
    """The windows' counts as Redis gives them (``in_redis``), or, while it cannot be reached, as
    this process keeps them (``locally``)."""
    try:
        counts = in_redis(get_redis(quick=True))
    except (redis.RedisError, OSError) as exc:
        _redis_lost(exc)
        return locally(windows, now)
    _redis_back()
    return counts


def hit_all(buckets: list[tuple[str, Rate]], now: float, *, tenant: object = None) -> float | None:
    """Count a request in each bucket, in one round trip: the longest wait of those over their
    rate, else None. ``tenant`` (its primary key): the buckets are the tenant's."""
    windows = [_Window.of(bucket, rate, now, tenant) for bucket, rate in buckets]

    def in_redis(client: Client) -> list[int]:
        pipe = client.pipeline(transaction=False)
        for window in windows:
            pipe.incr(window.key)
            pipe.expire(window.key, window.rate.seconds + 1)
        return [int(c) for c in pipe.execute()[::2]]

    return _waits(windows, _counts(windows, now, in_redis, local_windows.incr), now, at_least=1)


def hit(bucket: str, rate: Rate, now: float, *, tenant: object = None) -> float | None:
    """``hit_all`` of one bucket."""
    return hit_all([(bucket, rate)], now, tenant=tenant)


def over_all(buckets: list[tuple[str, Rate]], now: float, *, tenant: object = None) -> float | None:
    """Like ``hit_all`` without counting: the longest wait of the buckets whose window is already
    full, else None."""
    windows = [_Window.of(bucket, rate, now, tenant) for bucket, rate in buckets]
    if not windows:
        return None

    def in_redis(client: Client) -> list[int]:
        return [int(c or 0) for c in client.mget([window.key for window in windows])]

    return _waits(windows, _counts(windows, now, in_redis, local_windows.get), now, at_least=0)
