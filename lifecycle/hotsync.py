"""Keeping the Redis hot index in step with the layers in Postgres.

Postgres is the system of record and changes first; Redis follows after the commit. A process can
die between the two, and Redis can be down, so every change that leaves Redis behind sets
``needs_reindex`` in the same transaction. The repair task (``episodes.tasks.repair_hot_index``,
every minute) puts the marked episodes right, and ``hot_repair`` (the first step of every tick)
compares the whole tenant: no episode is left in Redis while Postgres says it is warm, cold or
forgotten.
"""

from __future__ import annotations

import logging
from typing import Any

from episodes.indexing import episodes_index_hot, hot_remove_packed, is_live_hot
from episodes.models import Episode, Layer, State
from episodes.stores.hot import HotUnavailable, hot_store
from episodes.stores.tables import EPISODES
from memory_platform import db
from memory_platform.tenancy.models import Tenant

logger = logging.getLogger(__name__)

#: (id, live hot, marked, has a vector) of the tenant's live hot episodes, then of its other
#: episodes marked for re-indexing: each part through its own index ((tenant, layer) and the
#: partial ``episode_needs_reindex``).
_REPAIR_ROWS = (
    f"SELECT e.id, true, e.needs_reindex, e.embedding IS NOT NULL FROM {EPISODES} e "
    f"WHERE e.tenant_id = %s AND e.layer = '{Layer.HOT.value}' AND e.state <> %s "
    f"UNION ALL SELECT e.id, false, true, false FROM {EPISODES} e "
    f"WHERE e.tenant_id = %s AND e.needs_reindex AND NOT (e.layer = '{Layer.HOT.value}' AND e.state <> %s)"
)


def sync_episode(tenant_id: Any, episode_id: int) -> bool:
    """Make Redis hold exactly what Postgres says about one of the tenant's episodes (after a commit)."""
    episode = Episode.objects.filter(tenant_id=tenant_id, pk=episode_id).select_related("tenant").first()
    if episode is None:
        return True
    if not is_live_hot(episode.layer, episode.state):
        return hot_remove_packed(episode)
    try:
        episodes_index_hot(tenant_id, [episode.pk])
        return True
    except HotUnavailable as exc:
        logger.warning("hot index unavailable; episode %s stays marked for re-indexing: %s", episode.pk, exc)
        Episode.objects.for_tenant(episode.tenant_id).filter(pk=episode.pk).update(needs_reindex=True)
        return False


def hot_repair(*, tenant: Tenant, limit: int = 10_000) -> dict[str, int]:
    """Compare the tenant's episode documents in Redis with the layers in Postgres and fix either
    side. Raises HotUnavailable when Redis cannot be reached (the caller records it)."""
    store = hot_store()
    # Redis first, then Postgres: an episode that reaches Redis after our read has committed in
    # Postgres before it, so the Postgres read below already sees it hot (no false "stale").
    in_redis = store.episode_ids(tenant.id.hex, limit=limit)
    # In one statement: the live hot episodes (marked or not, with a vector or not), and the
    # others marked for re-indexing.
    live_hot: dict[int, bool] = {}
    with_vector: set[int] = set()
    marked_packed: list[int] = []
    for pk, live, marked, vector in db.fetch(_REPAIR_ROWS, [tenant.pk, State.FORGOTTEN] * 2, tenant=tenant):
        if not live:
            marked_packed.append(int(pk))
            continue
        live_hot[int(pk)] = bool(marked)
        if vector:
            with_vector.add(int(pk))
    removed = indexed = 0
    stale = in_redis - set(live_hot)
    if stale:
        rows = {e.pk: e for e in Episode.objects.filter(tenant=tenant, pk__in=stale).select_related("tenant")}
        for episode_id in sorted(stale):
            if episode_id in rows:
                removed += int(hot_remove_packed(rows[episode_id]))
            else:  # purged meanwhile: its turn rows are gone, the episode document is what is left
                store.remove_episode(tenant.id.hex, episode_id, [])
                removed += 1
    # Packed or forgotten episodes whose removal was missed (a crash after the commit, Redis down).
    missed = [pk for pk in marked_packed if pk not in stale]
    if missed:
        for episode in Episode.objects.for_tenant(tenant).filter(pk__in=missed).select_related("tenant"):
            removed += int(hot_remove_packed(episode))
    # Live hot episodes without their episode document (only those with an embedding get one).
    to_index = sorted((with_vector - in_redis) | {pk for pk, marked in live_hot.items() if marked})
    if to_index:
        indexed = episodes_index_hot(tenant.pk, to_index)
    return {"removed": removed, "indexed": indexed}


def retag_state(episode: Episode, state: str) -> None:
    """A hot episode's state changed: its documents' state tag follows (default search filters on it)."""
    turn_ids = list(episode.turns.values_list("pk", flat=True))
    try:
        hot_store().update_episode_fields(episode, turn_ids, state=state)
    except HotUnavailable as exc:
        logger.warning("could not retag episode %s in the hot index: %s", episode.pk, exc)
        Episode.objects.for_tenant(episode.tenant_id).filter(pk=episode.pk).update(needs_reindex=True)
