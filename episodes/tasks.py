"""Worker tasks: thin and idempotent (running one twice indexes the same documents again)."""

from __future__ import annotations

from .indexing import episodes_index_hot
from .models import Episode


def index_episodes(episode_ids: list[int]) -> int:
    return episodes_index_hot(episode_ids)


def repair_hot_index(limit: int = 500) -> int:
    """Index episodes whose hot write was missed (Redis was down)."""
    ids = list(Episode.objects.filter(needs_reindex=True, layer="hot").values_list("pk", flat=True)[:limit])
    return episodes_index_hot(ids) if ids else 0
