"""A value computed once per process and kept for a while (statistics that steer a query plan)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def ttl_cached(cache: dict[str, tuple[float, Any]], key: str, ttl: float, compute: Callable[[], Any]) -> Any:
    """``compute()`` cached in ``cache`` under ``key`` for ``ttl`` seconds."""
    now = time.monotonic()
    cached = cache.get(key)
    if cached is None or now - cached[0] >= ttl:
        cached = (now, compute())
        cache[key] = cached
    return cached[1]
