"""A tenant's hot tier is bounded in bytes, least recently used out first (docs/concepts.md#hot-quota): one
tenant can never fill the Redis that every tenant's hot index lives in.

Pinned episodes (anchors) never leave hot by this rule, so they have a cap of their own inside the
quota: ``Policy.pinned_cap_bytes`` (``hot_pinned_share`` of ``hot_quota_bytes``) bounds what
the tenant's anchors weigh, in whatever layer they are (``policy.pinned_bytes``). Every way to pin
(a pinned memory, the pin endpoint, restoring or rolling back to a pinned episode, an import)
calls ``pin_check`` first and is refused whole past the cap; an anchor takes no turns after it was
pinned (``episodes.services``). Pinned bytes within their cap and unpinned ones sent to warm past
the rest: the sum holds (docs/decisions/0038-pinned-memories-within-the-hot-quota.md).

Ingest calls ``make_room`` once its turns are durable and before they are indexed (and unpacking
or pinning, once an episode is back in hot): while the
tenant's hot episodes weigh more than its policy's ``hot_quota_bytes``, the least recently used of
them go warm (journaled, as the tick would move them), never another tenant's and never an
anchor. The episodes just written go last, so a single batch larger than the quota still ends
within it: warm, found in Postgres, never lost. The tick applies the same bound
(``moves._hot_evictions``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Sum

from episodes.models import Episode, Layer, State
from episodes.services import ConflictError
from memory_platform.tenancy.models import Tenant

from . import transitions
from .compression import get_summariser
from .models import read_policy
from .moves import warm_shape
from .policy import pinned_bytes
from .tenant_policy import Policy

__all__ = ["PinnedCapExceeded", "hot_bytes", "make_room", "pin_check", "pinned_bytes", "pinned_weight"]

logger = logging.getLogger(__name__)


def hot_bytes(tenant: Tenant) -> int:
    """What the tenant's hot episodes weigh (``Episode.hot_bytes``), forgotten ones aside."""
    total = (
        Episode.objects.filter(tenant=tenant, layer=Layer.HOT)
        .exclude(state=State.FORGOTTEN)
        .aggregate(total=Sum("hot_bytes"))["total"]
    )
    return int(total or 0)


class PinnedCapExceeded(ConflictError):
    """A pin that would take the tenant's pinned bytes past its cap; nothing was written."""

    def __init__(self, *, policy: Policy, pinned: int, adding: int):
        self.cap_bytes = policy.pinned_cap_bytes
        self.pinned_bytes = pinned
        self.adding_bytes = adding
        self.hot_pinned_share = policy.hot_pinned_share
        self.hot_quota_bytes = policy.hot_quota_bytes
        super().__init__(
            f"pinning this would take the tenant's pinned memories to {pinned + adding} bytes, past their "
            f"cap of {self.cap_bytes} bytes (hot_pinned_share {self.hot_pinned_share:g} of hot_quota_bytes "
            f"{self.hot_quota_bytes}): {pinned} bytes are pinned now and this adds {adding}; unpin "
            "something first, or write it unpinned"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "cap": "hot_pinned_share",
            "cap_bytes": self.cap_bytes,
            "pinned_bytes": self.pinned_bytes,
            "adding_bytes": self.adding_bytes,
            "hot_pinned_share": self.hot_pinned_share,
            "hot_quota_bytes": self.hot_quota_bytes,
        }


def pinned_weight(*, anchor: bool, state: str, hot_bytes: int) -> int:
    """What one episode counts against its tenant's pinned cap: its hot bytes while it is a pinned,
    unforgotten episode; nothing otherwise. A write that pins adds the difference it makes."""
    return int(hot_bytes) if anchor and state != State.FORGOTTEN else 0


def pin_check(*, tenant: Tenant, adding: int, policy: Policy | None = None) -> None:
    """Raise PinnedCapExceeded when ``adding`` more pinned bytes would take the tenant past its cap.

    Called inside the transaction that pins, before it writes: the lock, held until that
    transaction ends, makes two concurrent pins of one tenant check one after the other (each
    would pass alone and both together go over). Nothing to add, nothing to check."""
    if adding <= 0:
        return
    if not connection.in_atomic_block:
        raise RuntimeError("pin_check runs inside the transaction that pins (its lock lasts until the end)")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"pins|{tenant.pk}"])
    policy = policy or read_policy(tenant)
    pinned = pinned_bytes(tenant.pk)
    if pinned + adding > policy.pinned_cap_bytes:
        raise PinnedCapExceeded(policy=policy, pinned=pinned, adding=adding)


def make_room(
    *,
    tenant: Tenant,
    now: datetime,
    arriving: Iterable[int] = (),
    actor: str = "quota",
    policy: Policy | None = None,
) -> list[int]:
    """Bring the tenant's hot tier back within its quota; returns the episodes sent to warm.

    ``arriving`` are the episodes the caller just wrote: they are the most recently used, so they
    leave only when everything older has left and the tenant is still over. ``policy``: the
    tenant's, when the caller has read it already."""
    policy = policy or read_policy(tenant)
    quota = int(policy.hot_quota_bytes)
    total = hot_bytes(tenant)
    if total <= quota:
        return []
    arriving = set(arriving)
    rows = list(
        Episode.objects.filter(tenant=tenant, layer=Layer.HOT, anchor=False)
        .exclude(state=State.FORGOTTEN)
        .order_by("last_accessed_at", "id")
        .values_list("pk", "hot_bytes")
    )
    # Least recently used first; the arriving episodes after every other one.
    rows.sort(key=lambda row: row[0] in arriving)
    summariser = get_summariser(policy)
    move = transitions.Move(now=now, actor=actor)
    moved: list[int] = []
    for episode_id, weight in rows:
        if total <= quota:
            break
        episode = Episode.objects.filter(tenant=tenant, pk=episode_id, layer=Layer.HOT).first()
        if episode is None:
            continue
        warm = warm_shape(episode, summariser, policy, now)
        if transitions.demote_to_warm(episode, warm, move=move, reason="hot_quota", source=warm.source):
            total -= weight
            moved.append(episode_id)
    if moved:
        logger.info(
            "tenant %s over its hot quota (%d bytes): %d episode(s) sent to warm",
            tenant.name,
            quota,
            len(moved),
        )
    return moved
