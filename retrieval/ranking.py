"""Ranking candidates: relevance (fused RRF) moved by the seed-003 priority.

Ranking reads five columns of each candidate, and only of those that can still reach the top.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

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


class RankRow(NamedTuple):
    pk: int
    layer: str
    anchor: bool
    access_count: int
    last_accessed_at: datetime


# The seed-003 priority: recency, frequency, anchor and relevance, each up to its weight.
RECENCY_WEIGHT = 0.3
FREQUENCY_WEIGHT = 0.2
ANCHOR_WEIGHT = 0.3
RELEVANCE_WEIGHT = 0.2
MAX_PRIORITY = RECENCY_WEIGHT + FREQUENCY_WEIGHT + ANCHOR_WEIGHT + RELEVANCE_WEIGHT


def rank_candidates(
    tenant: Tenant, relevance: dict[int, float], limit: int, weights: RetrievalWeights
) -> dict[int, RankRow]:
    """The candidates that can still reach the top ``limit``, with what ranking reads.

    The priority lifts a score by at most ``1 + weights.priority * MAX_PRIORITY``, so a candidate
    below the limit-th relevance divided by that factor cannot overtake it: it is never read.
    (Forgotten candidates drop out here; the bar is then lowered and more are read.)
    """
    order = sorted(relevance, key=lambda pk: -relevance[pk])
    lift = 1.0 + weights.priority * MAX_PRIORITY
    ranked: dict[int, RankRow] = {}
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


def rank_rows(tenant: Tenant, episode_ids: list[int]) -> list[RankRow]:
    """What ranking reads of each candidate, in one statement with the ids as one array."""
    if not episode_ids:
        return []
    rows = db.fetch(
        "SELECT id, layer, anchor, access_count, last_accessed_at FROM episodes_episode "
        "WHERE tenant_id = %s AND id = ANY(%s) AND state <> %s",
        [tenant.id, episode_ids, State.FORGOTTEN.value],
    )
    return [RankRow(*row) for row in rows]


def priority_parts(episode: Episode | RankRow, now: datetime) -> dict[str, float]:
    """Seed 003's priority without its relevance term: recency, frequency, anchor."""
    idle_days = max(0.0, (now - episode.last_accessed_at).total_seconds() / 86400)
    recency = RECENCY_WEIGHT * math.exp(-idle_days / 30.0)
    frequency = FREQUENCY_WEIGHT * min(1.0, math.log1p(episode.access_count) / math.log1p(50))
    anchor = ANCHOR_WEIGHT if episode.anchor else 0.0
    return {"recency": recency, "frequency": frequency, "anchor": anchor}


def rerank(
    ranked: dict[int, RankRow], relevance: dict[int, float], weights: RetrievalWeights, now: datetime
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
