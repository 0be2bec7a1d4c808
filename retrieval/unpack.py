"""Deep unpacking (seed 001 re-actualisation): restore an episode whole and make it hot again."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F

from episodes import selectors as episode_selectors
from episodes.indexing import embed_turns, episodes_index_hot
from episodes.models import Episode, Layer, State
from episodes.services import EpisodeNotFound
from episodes.stores.hot import HotUnavailable
from memory_platform.tenancy.models import Tenant

logger = logging.getLogger(__name__)


def unpack(*, tenant: Tenant, episode_id: int, now: datetime, record: bool = True) -> dict[str, Any]:
    """Restore an episode whole from its turns and make it current: back to hot, re-embedded,
    indexed again. The packed shape is kept (marked restored) so the move can be undone."""
    with transaction.atomic():
        episode = (
            Episode.objects.select_for_update()
            .filter(tenant=tenant, pk=episode_id)
            .exclude(state=State.FORGOTTEN)
            .first()
        )
        if episode is None:
            raise EpisodeNotFound(episode_id)
        previous_layer = episode.layer
        if previous_layer != Layer.HOT:
            from lifecycle.journal import snapshot

            before = snapshot(episode)
            turns = list(episode.turns.order_by("seq", "id"))
            episode.tenant = tenant
            embed_turns(episode, turns, only_missing=False)
            episode.layer = Layer.HOT
            episode.restored_at = now
            episode.search_text = "\n".join(t.text for t in turns)[:200_000]
            episode.needs_reindex = True
            episode.save(update_fields=["layer", "restored_at", "embedding", "search_text", "needs_reindex"])
            _journal_unpack(tenant, episode, before, now)
        Episode.objects.filter(pk=episode.pk).update(
            access_count=F("access_count") + (1 if record else 0),
            last_accessed_at=now,
            version=F("version") + 1,
        )
        if previous_layer != Layer.HOT:
            transaction.on_commit(lambda: _index_quietly(episode.pk))
    episode.refresh_from_db()
    body = episode_selectors.episode_shape(episode, deep=True)
    body["unpacked_from"] = previous_layer
    return body


def _journal_unpack(tenant: Tenant, episode: Episode, before: dict[str, Any], now: datetime) -> None:
    """Upward migration is journaled with the full prior shape, so a rollback is exact."""
    from lifecycle.journal import journal_record

    journal_record(
        tenant=tenant, episode=episode, action="unpack", before=before, after={"layer": Layer.HOT}, now=now
    )


def _index_quietly(episode_id: int) -> None:
    try:
        episodes_index_hot([episode_id])
    except HotUnavailable as exc:
        logger.warning("unpacked episode %s waits for the hot index: %s", episode_id, exc)
