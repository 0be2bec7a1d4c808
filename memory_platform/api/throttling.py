"""The API's rate limits per key and per tenant (``memory_platform.ratelimit``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from memory_platform.conf import memory_settings
from memory_platform.ratelimit import Rate, hit_all
from memory_platform.tenancy.models import ApiKey


class ApiKeyThrottle(BaseThrottle):
    """Each key at its tenant's ``rate_limit`` (else ``MEMORY_RATE_LIMIT``), and the tenant's keys
    together at ``MEMORY_TENANT_RATE_LIMIT``."""

    clock: Callable[[], float] = time.time

    def allow_request(self, request: Request, view: Any) -> bool:
        key = request.auth
        self._wait: float | None = None
        if not isinstance(key, ApiKey):
            return True  # authentication has already answered
        now = self.clock()
        per_key = Rate.parse(key.tenant.rate_limit or str(memory_settings.RATE_LIMIT))
        per_tenant = Rate.parse(str(memory_settings.TENANT_RATE_LIMIT))
        # The tenant's hash tag on both windows: on a Redis Cluster they live in the tenant's slot,
        # with its other keys (docs/decisions/0052), and are counted in one round trip there.
        buckets = [(f"key:{key.prefix}", per_key), ("tenant", per_tenant)]
        self._wait = hit_all(buckets, now, tenant=key.tenant_id)
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait
