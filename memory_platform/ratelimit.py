"""Rate limits: fixed-window counters in Redis, shared by every server process.

Limits are written ``N/s`` or ``N/min``. Each API key may make ``MEMORY_RATE_LIMIT`` requests (a
tenant's ``rate_limit`` overrides it for its keys), a tenant's keys together
``MEMORY_TENANT_RATE_LIMIT``; a client address may fail ``AUTH_FAILURE_LIMIT`` API-key or admin
logins. Over a limit the answer is 429 with ``Retry-After``.

When Redis cannot be reached a request is let through: the limits protect the service and must
not be what takes it down (the hot tier's own outage handling says so to callers).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import redis

from memory_platform.redis_client import get_redis

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


def _key(bucket: str, rate: Rate, now: float) -> tuple[str, int]:
    window = int(now // rate.seconds)
    return f"mp:rl:{bucket}:{rate.seconds}:{window}", window


def _wait(rate: Rate, window: int, now: float) -> float:
    return max(0.001, (window + 1) * rate.seconds - now)


def hit(bucket: str, rate: Rate, now: float) -> float | None:
    """Count a request in ``bucket``'s current window: the seconds to wait when it is over the
    rate, else None."""
    return hit_all([(bucket, rate)], now)


def hit_all(buckets: list[tuple[str, Rate]], now: float) -> float | None:
    """Count a request in each bucket, in one round trip: the longest wait of those over their
    rate, else None."""
    keys = [(_key(bucket, rate, now), rate) for bucket, rate in buckets]
    try:
        pipe = get_redis().pipeline(transaction=False)
        for (key, _), rate in keys:
            pipe.incr(key)
            pipe.expire(key, rate.seconds + 1)
        counts = [int(c) for c in pipe.execute()[::2]]
    except (redis.RedisError, OSError) as exc:
        logger.warning("rate limits not counted (Redis unreachable): %s", exc)
        return None
    waits = [
        _wait(rate, window, now)
        for ((_, window), rate), count in zip(keys, counts, strict=True)
        if count > rate.count
    ]
    return max(waits) if waits else None


def over(bucket: str, rate: Rate, now: float) -> float | None:
    """Like ``hit`` without counting: the seconds to wait when the window is already full."""
    key, window = _key(bucket, rate, now)
    try:
        count = int(get_redis().get(key) or 0)
    except (redis.RedisError, OSError):
        return None
    return _wait(rate, window, now) if count >= rate.count else None
