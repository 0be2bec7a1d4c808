"""The read path: search, activate, context, unpack."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memory_platform.tenancy.models import Tenant


def unpack(*, tenant: Tenant, episode_id: int, now: datetime) -> dict[str, Any]:
    raise NotImplementedError
