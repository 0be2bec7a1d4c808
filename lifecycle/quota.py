"""A tenant's hot tier is bounded in bytes (DESIGN §3 LRU): one tenant can never fill the Redis
that every tenant's hot index lives in.

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

from django.db.models import Sum

from episodes.models import Episode, Layer, State
from memory_platform.tenancy.models import Tenant

from . import transitions
from .compression import get_summariser
from .models import policy_for
from .moves import warm_shape

logger = logging.getLogger(__name__)


def hot_bytes(tenant: Tenant) -> int:
    """What the tenant's hot episodes weigh (``Episode.hot_bytes``), forgotten ones aside."""
    total = (
        Episode.objects.filter(tenant=tenant, layer=Layer.HOT)
        .exclude(state=State.FORGOTTEN)
        .aggregate(total=Sum("hot_bytes"))["total"]
    )
    return int(total or 0)


def make_room(
    *, tenant: Tenant, now: datetime, arriving: Iterable[int] = (), actor: str = "quota"
) -> list[int]:
    """Bring the tenant's hot tier back within its quota; returns the episodes sent to warm.

    ``arriving`` are the episodes the caller just wrote: they are the most recently used, so they
    leave only when everything older has left and the tenant is still over."""
    policy = policy_for(tenant)
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
