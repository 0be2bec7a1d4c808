"""Worker tasks: thin and idempotent (running one twice indexes the same documents again)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from memory_platform.embeddings import EmbeddingError

from .indexing import episodes_index_hot
from .models import Episode

logger = logging.getLogger(__name__)


def index_episodes(episode_ids: list[int], tenant_id: str | None = None) -> int:
    """Index a tenant's episodes after an async ingest. (Tasks queued by versions before the
    tenant was passed carry none: their episodes are indexed tenant by tenant.)"""
    if tenant_id is not None:
        return episodes_index_hot(tenant_id, episode_ids)
    return _index_by_tenant(Episode.objects.filter(pk__in=episode_ids).values_list("tenant_id", "pk"))


def repair_hot_index(limit: int = 500) -> int:
    """Index the hot episodes whose Redis write was missed (Redis was down or full), tenant by
    tenant. Scheduled every minute (``lifecycle.tasks.schedule_ticks``): the task queue lives in
    Redis too, so it runs again within a minute of Redis coming back."""
    marked = (
        Episode.objects.filter(needs_reindex=True, layer="hot")
        .exclude(state="forgotten")
        .values_list("tenant_id", "pk")[:limit]
    )
    return _index_by_tenant(marked)


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
