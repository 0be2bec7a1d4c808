"""Worker tasks: thin and idempotent (running one twice indexes the same documents again)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q

from memory_platform.embeddings import EmbeddingError
from memory_platform.locks import advisory_lock
from memory_platform.tenancy.models import Tenant

from .indexing import collect_hot_garbage, episodes_index_hot, hot_remove_packed, is_live_hot
from .models import Episode, Layer, State, Turn

logger = logging.getLogger(__name__)

#: The advisory lock (``memory_platform.locks``) one repair holds while it runs.
REPAIR_LOCK = "episodes.repair_hot_index"


def index_episodes(episode_ids: list[int], tenant_id: str | None = None) -> int:
    """Index a tenant's episodes after an async ingest. (Tasks queued by versions before the
    tenant was passed carry none: their episodes are indexed tenant by tenant.)"""
    if tenant_id is not None:
        return episodes_index_hot(tenant_id, episode_ids)
    old_tasks = Episode.objects.across_tenants("an old task names episodes, not their tenant")
    return _index_by_tenant(old_tasks.filter(pk__in=episode_ids).values_list("tenant_id", "pk"))


def repair_hot_index(limit: int = 500) -> int:
    """Put right what Redis missed, tenant by tenant: index the hot episodes whose write was
    missed (Redis was down or full), and take out the documents of episodes that left hot (packed
    or forgotten) whose removal was missed (a tick killed between its commit and Redis, Redis
    down). Each such change marks its episode ``needs_reindex`` in its own transaction
    (``lifecycle.hotsync``), so the marks are all there is to read. Scheduled every minute
    (``lifecycle.tasks.schedule_ticks``): the task queue lives in Postgres, so it runs while Redis
    is lost and within a minute of its return. Returns how many episodes it put right.

    One repair at a time across every worker: a second one (a run that outlived its minute, a
    retried task, another node's worker) returns 0 at once instead of reading the same marks and
    embedding and indexing their turns again."""
    with advisory_lock(REPAIR_LOCK) as held:
        if not held:
            logger.info("the hot index repair is running elsewhere; this one has nothing to do")
            return 0
        return _repair(limit)


def after_redis_restart(sender: Any = None, *, since: datetime, **kwargs: Any) -> int:
    """The hot index's Redis was started again after it died (``memory_platform.signals``): the
    live hot episodes written since ``since`` (a new one, or a turn added) may have lost their
    documents with it, and are marked for re-indexing; the repair is queued at once rather than
    within its minute. Returns how many episodes were marked."""
    from django_q.tasks import async_task

    written = Turn.objects.across_tenants("a restarted Redis: every tenant's latest turns").filter(
        ingested_at__gte=since
    )
    marked = (
        Episode.objects.across_tenants("a restarted Redis: every tenant's latest episodes")
        .filter(layer=Layer.HOT)
        .exclude(state=State.FORGOTTEN)
        .filter(Q(created_at__gte=since) | Q(pk__in=written.values("episode_id")))
        .update(needs_reindex=True)
    )
    async_task(repair_hot_index)
    logger.warning(
        "Redis was restarted: %d episode(s) written since %s marked for re-indexing", marked, since
    )
    return marked


def _repair(limit: int) -> int:
    marked = list(
        Episode.objects.across_tenants("repair: every tenant's marked episodes")
        .filter(needs_reindex=True)
        .values_list("tenant_id", "pk", "layer", "state")[:limit]
    )
    live = [(tenant_id, pk) for tenant_id, pk, layer, state in marked if is_live_hot(layer, state)]
    left = [pk for _, pk, layer, state in marked if not is_live_hot(layer, state)]
    removed = 0
    emptied: dict[Any, Tenant] = {}
    for pk in left:
        # The row stays locked while its documents go: an unpack that brings it back to hot
        # meanwhile waits, and indexes it after, instead of being undone by this removal.
        with transaction.atomic():
            episode = (
                Episode.objects.across_tenants("repair: a marked episode, its tenant read with it")
                .select_for_update(of=("self",))
                .select_related("tenant")
                .filter(pk=pk, needs_reindex=True)
                .first()
            )
            if episode is None or is_live_hot(episode.layer, episode.state):
                continue
            if hot_remove_packed(episode):
                removed += 1
                emptied[episode.tenant_id] = episode.tenant
    for tenant in emptied.values():
        collect_hot_garbage(tenant)  # as after a tick's batch of moves (docs/decisions/0033)
    return removed + _index_by_tenant(live)


def _index_by_tenant(rows: Iterable[tuple[Any, int]]) -> int:
    by_tenant: dict[Any, list[int]] = defaultdict(list)
    for tenant_id, pk in rows:
        by_tenant[tenant_id].append(pk)
    indexed = 0
    for tenant_id, ids in by_tenant.items():
        try:
            indexed += episodes_index_hot(tenant_id, ids)
        except EmbeddingError as exc:
            # One tenant's embedding server being down must not hold up the others' repair; its
            # episodes keep their mark and are tried again on the next run.
            logger.warning("tenant %s: %d episode(s) wait for their embedder: %s", tenant_id, len(ids), exc)
    return indexed
