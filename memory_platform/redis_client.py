"""One Redis connection pool per process, built from ``settings.REDIS_URL``."""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings

_clients: dict[str, redis.Redis] = {}


def get_redis() -> redis.Redis:
    url = settings.REDIS_URL
    client = _clients.get(url)
    if client is None:
        client = redis.Redis.from_url(
            url, socket_timeout=5, socket_connect_timeout=2, health_check_interval=30, retry_on_timeout=False
        )
        _clients[url] = client
    return client


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
