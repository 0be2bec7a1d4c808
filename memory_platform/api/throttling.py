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
        self._wait = hit_all([(f"key:{key.prefix}", per_key), (f"tenant:{key.tenant_id}", per_tenant)], now)
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait
