"""One Redis connection pool per process, built from ``settings.REDIS_URL``."""

from __future__ import annotations

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
