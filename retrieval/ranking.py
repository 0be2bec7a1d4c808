"""How search is ranked: each tier's lists fused by weighted RRF (``fusion``), grouped by episode,
then moved by the seed-003 priority of the tenant's policy (``lifecycle.scoring.priority``).

score = relevance × (1 + share × priority) × state weight, where relevance is the episode's best
fused score and priority (recency, frequency, anchor, and relevance itself, each up to its policy
weight) is in [0, 1]: relevance stays first, and the priority moves a hit by at most ``share`` of
itself. The state weight (``STATE_WEIGHTS``) ranks a dormant episode or a delete candidate below an
active one as relevant, without hiding it.

Ranking reads a few columns of each candidate, and only of those that can still reach the top.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from episodes.models import Episode, State
from episodes.stores import rows
from episodes.stores.hot import Feedback
from lifecycle import scoring
from memory_platform.conf import memory_settings
from memory_platform.tenancy.models import Tenant

from .fusion import weighted_rrf


@dataclass(frozen=True)
class RetrievalWeights:
    """The fusion of a search: list weights and RRF k (seed 004), the priority's share, how many
    candidates each list gives, and the hot KNN query's pseudo-relevance feedback."""

    vector: float
    text: float
    k: int
    priority: float
    candidates: int
    feedback: Feedback


def platform_weights() -> RetrievalWeights:
    """The platform's fusion settings (``MEMORY``), before any tenant's policy."""
    return RetrievalWeights(
        vector=float(memory_settings.RRF_VECTOR_WEIGHT),
        text=float(memory_settings.RRF_TEXT_WEIGHT),
        k=int(memory_settings.RRF_K),
        priority=float(memory_settings.SEARCH_PRIORITY_SHARE),
        candidates=int(memory_settings.SEARCH_CANDIDATES),
        feedback=Feedback(
            docs=int(memory_settings.SEARCH_FEEDBACK_DOCS),
            weight=float(memory_settings.SEARCH_FEEDBACK_WEIGHT),
        ),
    )


def tenant_weights(policy: Any) -> RetrievalWeights:
    """The fusion the tenant's policy sets (seed 004 weights and k) on the platform's settings."""
    return dataclasses.replace(
        platform_weights(), vector=policy.rrf_vector_weight, text=policy.rrf_text_weight, k=policy.rrf_k
    )


#: How far each state moves a hit down: a dormant episode (seed 002: low activity) or a candidate
#: for deletion is still found, below active ones of about the same relevance. Near the top of
#: a fused list one rank is worth about 1.6% of the score (RRF, k = 60), so these are about one and
#: three ranks (larger factors buried old memories: docs/decisions/0015). At most 1, so
#: ``rank_candidates``'s bound (the highest lift) still holds.
STATE_WEIGHTS: dict[str, float] = {State.ACTIVE: 1.0, State.DORMANT: 0.98, State.DELETE_CANDIDATE: 0.95}


# (vector hits, text hits) of one tier, best first.
Lists = tuple[list[Any], list[Any]]


def fuse_hot(
    lists: Lists, weights: RetrievalWeights
) -> tuple[dict[int, list[tuple[int, float]]], dict[int, dict[str, Any]]]:
    vector_hits, text_hits = lists
    episode_of = {h.turn_id: h.episode_id for h in vector_hits + text_hits if h.turn_id is not None}
    fused = weighted_rrf(
        {
            "vector": [h.turn_id for h in vector_hits if h.turn_id is not None],
            "text": [h.turn_id for h in text_hits if h.turn_id is not None],
        },
        {"vector": weights.vector, "text": weights.text},
        k=weights.k,
    )
    per_episode: dict[int, list[tuple[int, float]]] = {}
    explain: dict[int, dict[str, Any]] = {}
    for item in fused:
        turn_id = int(item.key)  # type: ignore[call-overload]
        episode_id = episode_of[turn_id]
        per_episode.setdefault(episode_id, []).append((turn_id, item.score))
        if episode_id not in explain:
            explain[episode_id] = {
                "source": "hot",
                "best_turn_id": turn_id,
                "vector_rank": item.ranks.get("vector"),
                "text_rank": item.ranks.get("text"),
                "rrf": item.score,
            }
    return per_episode, explain


def fuse_archive(lists: Lists, weights: RetrievalWeights) -> dict[int, tuple[float, dict[str, Any]]]:
    vector_hits, text_hits = lists
    fused = weighted_rrf(
        {"vector": [e for e, _ in vector_hits], "text": [e for e, _ in text_hits]},
        {"vector": weights.vector, "text": weights.text},
        k=weights.k,
    )
    return {
        int(item.key): (  # type: ignore[call-overload]
            item.score,
            {
                "source": "postgres",
                "vector_rank": item.ranks.get("vector"),
                "text_rank": item.ranks.get("text"),
                "rrf": item.score,
            },
        )
        for item in fused
    }


def stats_of(row: rows.RankRow | Episode) -> scoring.EpisodeStats:
    """What the priority reads of a candidate."""
    return scoring.EpisodeStats(
        created_at=row.created_at,
        first_occurred_at=row.first_occurred_at,
        access_count=row.access_count,
        last_accessed_at=row.last_accessed_at,
        anchor=bool(row.anchor),
    )


def rank_candidates(
    tenant: Tenant, relevance: dict[int, float], limit: int, weights: RetrievalWeights
) -> dict[int, rows.RankRow]:
    """The candidates that can still reach the top ``limit``, with what ranking reads.

    The priority lifts a score by at most ``1 + weights.priority * scoring.PRIORITY_MAX``, so a
    candidate below the limit-th relevance divided by that factor cannot overtake it: it is never
    read. (Forgotten candidates drop out here; the bar is then lowered and more are read.)
    """
    order = sorted(relevance, key=lambda pk: -relevance[pk])
    lift = 1.0 + weights.priority * scoring.PRIORITY_MAX
    ranked: dict[int, rows.RankRow] = {}
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
        ranked.update((row.pk, row) for row in rows.rank_rows(tenant, order[position:end]))
        position = end
    return ranked


def rerank(
    ranked: dict[int, rows.RankRow],
    relevance: dict[int, float],
    weights: RetrievalWeights,
    policy: Any,
    now: datetime,
) -> list[tuple[int, float, dict[str, float]]]:
    """(episode id, score, score parts), best first: relevance moved by the tenant's priority."""
    if not relevance:
        return []
    top = max(relevance.values()) or 1.0
    out = []
    for episode_id, row in ranked.items():
        rel = relevance[episode_id] / top  # 0-1
        terms = scoring.priority_terms(stats_of(row), policy, now, relevance=rel)
        priority = scoring.priority_of(terms)
        state = STATE_WEIGHTS.get(row.state, 1.0)
        score = relevance[episode_id] * (1.0 + weights.priority * priority) * state
        parts = {k: v for k, v in terms.items() if k != "relevance"}
        out.append((episode_id, score, {**parts, "relevance": rel, "priority": priority, "state": state}))
    out.sort(key=lambda x: -x[1])
    return out
