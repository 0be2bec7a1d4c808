"""Ranking candidates: relevance (fused RRF) moved by the seed-003 priority.

Only candidates that can still reach the top are read, each as a hit shows it, so the hits kept
need no second statement.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from episodes.models import Episode, State
from episodes.stores.hot import Feedback
from memory_platform import db
from memory_platform.tenancy.models import Tenant


@dataclass(frozen=True)
class RetrievalWeights:
    vector: float = 0.7
    text: float = 0.3
    k: int = 60
    #: How much the seed-003 priority (recency, frequency, anchor) moves a hit, relative to
    #: its relevance; relevance stays first.
    priority: float = 0.15
    candidates: int = 50
    #: Pseudo-relevance feedback of the hot KNN query (``docs`` 0: none).
    feedback: Feedback = Feedback()


# The seed-003 priority: recency, frequency, anchor and relevance, each up to its weight.
RECENCY_WEIGHT = 0.3
FREQUENCY_WEIGHT = 0.2
ANCHOR_WEIGHT = 0.3
RELEVANCE_WEIGHT = 0.2
MAX_PRIORITY = RECENCY_WEIGHT + FREQUENCY_WEIGHT + ANCHOR_WEIGHT + RELEVANCE_WEIGHT


def rank_candidates(
    tenant: Tenant, relevance: dict[int, float], limit: int, weights: RetrievalWeights
) -> dict[int, Episode]:
    """The candidates that can still reach the top ``limit``, read (see ``rank_rows``).

    The priority lifts a score by at most ``1 + weights.priority * MAX_PRIORITY``, so a candidate
    below the limit-th relevance divided by that factor cannot overtake it: it is never read.
    (Forgotten candidates drop out here; the bar is then lowered and more are read.)
    """
    order = sorted(relevance, key=lambda pk: -relevance[pk])
    lift = 1.0 + weights.priority * MAX_PRIORITY
    ranked: dict[int, Episode] = {}
    position = 0
    while position < len(order):
        usable = sorted((relevance[pk] for pk in ranked), reverse=True)
        if len(usable) >= limit:
            bar = usable[limit - 1] / lift
        else:
            # Not enough usable candidates read yet: count the unread ones (in relevance order,
            # below every read one) as usable until read.
            bar = relevance[order[min(position + limit - len(usable), len(order)) - 1]] / lift
        end = position
        while end < len(order) and relevance[order[end]] >= bar:
            end += 1
        if end == position:
            break
        ranked.update((row.pk, row) for row in rank_rows(tenant, order[position:end]))
        position = end
    return ranked


def rank_rows(tenant: Tenant, episode_ids: list[int]) -> list[Episode]:
    """The candidates (not forgotten) as a hit shows them, in one statement with the ids as one
    array: every column but vectors, search text and metadata (a few more than ranking reads,
    which saves reading the hits kept again)."""
    if not episode_ids:
        return []
    columns, names = hit_columns()
    rows = db.fetch(
        f"SELECT {columns} FROM episodes_episode WHERE tenant_id = %s AND id = ANY(%s) AND state <> %s",
        [tenant.id, episode_ids, State.FORGOTTEN.value],
    )
    return [Episode.from_db(connection.alias, names, row) for row in rows]


@functools.cache
def hit_columns() -> tuple[str, list[str]]:
    """An episode's columns as a hit shows it (vectors, search text and metadata stay behind),
    and their field names."""
    left_out = {"embedding", "search_text", "search_vector", "metadata"}
    fields = [f for f in Episode._meta.concrete_fields if f.attname not in left_out]
    return db.column_list(fields), [f.attname for f in fields]


def priority_parts(episode: Episode, now: datetime) -> dict[str, float]:
    """Seed 003's priority without its relevance term: recency, frequency, anchor."""
    idle_days = max(0.0, (now - episode.last_accessed_at).total_seconds() / 86400)
    recency = RECENCY_WEIGHT * math.exp(-idle_days / 30.0)
    frequency = FREQUENCY_WEIGHT * min(1.0, math.log1p(episode.access_count) / math.log1p(50))
    anchor = ANCHOR_WEIGHT if episode.anchor else 0.0
    return {"recency": recency, "frequency": frequency, "anchor": anchor}


def rerank(
    ranked: dict[int, Episode], relevance: dict[int, float], weights: RetrievalWeights, now: datetime
) -> list[tuple[int, float, dict[str, float]]]:
    """(episode id, score, score parts), best first: relevance moved by the seed-003 priority."""
    if not relevance:
        return []
    top = max(relevance.values()) or 1.0
    out = []
    for episode_id, row in ranked.items():
        rel = relevance[episode_id] / top  # 0-1
        parts = priority_parts(row, now)
        priority = sum(parts.values()) + RELEVANCE_WEIGHT * rel
        # Relevance first; the priority moves a hit by at most `weights.priority` of itself.
        score = relevance[episode_id] * (1.0 + weights.priority * priority)
        out.append((episode_id, score, {**parts, "relevance": rel, "priority": priority}))
    out.sort(key=lambda x: -x[1])
    return out
