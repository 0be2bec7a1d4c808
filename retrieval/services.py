"""The read path: hybrid search over every tier, activation, context assembly, unpacking.

One query embedding; hot candidates from Redis (BM25 over turns, then KNN with the query moved
towards the best BM25 hits), warm and cold candidates from Postgres (pgvector + full text);
weighted RRF; grouped by episode; re-ranked by the seed-003 priority; each hit shaped by its layer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np

from episodes import shapes
from episodes.models import Episode, Layer, State
from episodes.scope import ALL_LAYERS, Scope
from episodes.services import EpisodeNotFound
from episodes.stores import archive, rows
from episodes.stores.hot import HotUnavailable, hot_store, unavailable_reason
from episodes.stores.rows import turns_for
from lifecycle import scoring
from lifecycle.selectors import SearchSettings, search_settings
from lifecycle.services import feedback_review
from memory_platform.embeddings import EmbeddingError, get_embedder
from memory_platform.tenancy.models import Tenant

from . import usage
from .query import SearchQuery
from .ranking import (
    Lists,
    RetrievalWeights,
    fuse_archive,
    fuse_hot,
    rank_candidates,
    rerank,
    stats_of,
    tenant_weights,
)
from .unpack import unpack

logger = logging.getLogger(__name__)

_hot_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hot-search")


def _settings(tenant: Tenant) -> SearchSettings:
    """The policy's search settings, read once per tenant object (one request, one command run)."""
    cached: SearchSettings | None = getattr(tenant, "_search_settings", None)
    if cached is None:
        cached = search_settings(tenant)
        tenant._search_settings = cached  # type: ignore[attr-defined]
    return cached


def activation_limit(tenant: Tenant) -> int:
    return int(_settings(tenant).activation_limit)


@dataclass
class Hit:
    episode: Episode
    relevance: float
    score: float = 0.0
    matched: list[tuple[int, float]] = field(default_factory=list)  # (turn id, fused score)
    explain: dict[str, Any] = field(default_factory=dict)
    #: The best cosine similarity of the query to a turn of the episode (with ``min_score``).
    similarity: float | None = None


@dataclass
class SearchResult:
    hits: list[Hit]
    degraded: bool
    took_ms: float
    query_vector: np.ndarray | None = None
    #: Some of the tenant's hot episodes are not in the hot index yet (see `rows.hot_index_stale`);
    #: search finds them in Postgres meanwhile.
    stale: bool = False
    #: Why the answer is degraded ("" when it is not).
    reason: str = ""

    def ranked_items(self) -> list[tuple[str, int, float]]:
        """The ranked list as the evaluation counts it: one item per matched turn of a hot hit,
        one per warm or cold hit, ordered by the item's own score."""
        items: list[tuple[str, int, float]] = []
        for hit in self.hits:
            if hit.episode.layer == Layer.HOT and hit.matched:
                factor = hit.score / hit.relevance if hit.relevance else 1.0
                items.extend(("turn", turn_id, s * factor) for turn_id, s in hit.matched)
            else:
                items.append(("episode", hit.episode.pk, hit.score))
        items.sort(key=lambda x: -x[2])
        return items


def query_embedded(tenant: Tenant) -> bool:
    """Whether the platform embeds this tenant's query texts (else only a caller's vector serves)."""
    return get_embedder(tenant.embedder).computes


def query_vector(tenant: Tenant, query: SearchQuery) -> np.ndarray | None:
    if query.vector is not None:
        return query.vector
    embedder = get_embedder(tenant.embedder)
    if not embedder.computes or not query.text.strip():
        return None
    try:
        return embedder.embed_one(query.text)
    except EmbeddingError as exc:
        logger.warning("query embedding failed, searching text only: %s", exc)
        return None


def search(
    *, tenant: Tenant, query: SearchQuery, now: datetime, weights: RetrievalWeights | None = None
) -> SearchResult:
    started = time.perf_counter()
    window = query.scope.occurred_from, query.scope.occurred_to
    if window[0] is not None and window[1] is not None and window[0] > window[1]:
        return SearchResult(hits=[], degraded=False, took_ms=0.0)  # a window that ends before it starts
    weights = weights or tenant_weights(_settings(tenant))
    k = max(weights.candidates, query.limit * 3)
    degraded = False
    hot_turns: dict[int, list[tuple[int, float]]] = {}
    episode_relevance: dict[int, float] = {}
    explain: dict[int, dict[str, Any]] = {}

    layers = query.scope.layers or ALL_LAYERS
    archive_layers = tuple(layer for layer in layers if layer != Layer.HOT)
    if archive_layers and not archive.holds(tenant.pk, archive_layers):
        # Nothing packed yet (a young tenant): the two warm/cold statements would find nothing,
        # and planning them costs more than this look at the (tenant, layer) index.
        archive_layers = ()
    search_hot = Layer.HOT in layers
    # Hot episodes the index missed (Redis was down or full, or a write a moment old) are searched
    # in Postgres until the repair has indexed them.
    missed = _narrow(rows.hot_index_stale(tenant), query.scope.episode_ids) if search_hot else []
    reason, outage = "", False
    text = query.text if query.text.strip() else None
    # The query is embedded first: on 2 cores the model's threads and concurrent searches would
    # take the same cores (docs/decisions/0004).
    vector = query_vector(tenant, query)
    # Redis answers in a worker thread while Postgres answers here: the two tiers are searched at
    # the same time (the database connection stays on this thread, inside its transaction).
    hot_future = _hot_pool.submit(_hot_lists, tenant, query, vector, text, k, weights) if search_hot else None
    archive_hits = (
        fuse_archive(_archive_lists(tenant, query, vector, text, k, archive_layers), weights)
        if archive_layers
        else {}
    )
    if missed:
        narrowed = replace(query, scope=query.scope.replace(episode_ids=tuple(missed)))
        for pk, found in fuse_archive(
            _archive_lists(tenant, narrowed, vector, text, k, (Layer.HOT,)), weights
        ).items():
            archive_hits.setdefault(pk, found)
    if hot_future is not None:
        try:
            # A Redis still loading its data answers LOADING, which redis-py raises as
            # BusyLoadingError (a RedisError): it lands in the degraded branch below like an outage.
            hot_turns, hot_explain = fuse_hot(hot_future.result(), weights)
            explain.update(hot_explain)
            for episode_id, turns in hot_turns.items():
                episode_relevance[episode_id] = turns[0][1]
        except HotUnavailable as exc:
            logger.warning("hot tier unavailable, answering from Postgres: %s", exc)
            degraded = outage = True
            reason = f"{unavailable_reason(exc)}; answered from Postgres"
            archive_hits = fuse_archive(_archive_lists(tenant, query, vector, text, k, layers), weights)

    for episode_id, (score, parts) in archive_hits.items():
        if score > episode_relevance.get(episode_id, 0.0):
            episode_relevance[episode_id] = score
            explain[episode_id] = parts

    # Ranking reads a few columns of every candidate; only the hits kept are loaded whole
    # (building model objects for every candidate costs more than the statements).
    ranked = rank_candidates(tenant, episode_relevance, query.limit, weights)
    if degraded and vector is not None:
        hot_ids = [pk for pk, row in ranked.items() if row.layer == Layer.HOT]
        for episode_id, sims in rows.turn_similarities(tenant, hot_ids, vector).items():
            base = episode_relevance[episode_id]
            hot_turns[episode_id] = [(t, base * (0.5 + 0.5 * max(s, 0.0))) for t, s in sims[:5]]

    order = rerank(ranked, episode_relevance, weights, _settings(tenant), now)[: query.limit]
    episodes = rows.hit_episodes(tenant, [pk for pk, _, _ in order])
    hits = []
    for pk, score, parts in order:
        if pk not in episodes:  # forgotten since it was ranked
            continue
        hit = Hit(
            episode=episodes[pk], relevance=episode_relevance[pk], score=score, matched=hot_turns.get(pk, [])
        )
        if query.explain:
            hit.explain = {**explain.get(pk, {}), **parts, "score": score}
        hits.append(hit)
    if query.min_score is not None:
        hits = _at_least(tenant, hits, vector, query.min_score)
    if query.record_access and hits:
        record_access(tenant=tenant, episode_ids=[h.episode.pk for h in hits], now=now)
    if missed and not degraded:
        refused = hot_store().refusing_writes()
        if refused:
            degraded = True
            reason = f"{refused}; {len(missed)} new hot episode(s) are answered from Postgres until indexed"
    return SearchResult(
        hits=hits,
        degraded=degraded,
        took_ms=(time.perf_counter() - started) * 1000,
        query_vector=vector,
        stale=bool(missed) and not outage,
        reason=reason,
    )


def _at_least(tenant: Tenant, hits: list[Hit], vector: np.ndarray | None, min_score: float) -> list[Hit]:
    """The hits whose best turn is at least ``min_score`` similar to the query (none without a
    query vector: nothing can be shown to pass)."""
    if vector is None:
        return []
    best = {
        episode_id: sims[0][1]
        for episode_id, sims in rows.turn_similarities(tenant, [h.episode.pk for h in hits], vector).items()
    }
    kept = []
    for hit in hits:
        hit.similarity = best.get(hit.episode.pk)
        if hit.similarity is not None and hit.similarity >= min_score:
            kept.append(hit)
    return kept


def _narrow(ids: list[int], within: tuple[int, ...]) -> list[int]:
    if not within:
        return ids
    allowed = set(within)
    return [pk for pk in ids if pk in allowed]


def _hot_lists(
    tenant: Tenant,
    query: SearchQuery,
    vector: np.ndarray | None,
    text: str | None,
    k: int,
    weights: RetrievalWeights,
) -> Lists:
    return hot_store().search(
        tenant.id.hex, vector=vector, text=text, scope=query.scope, k=k, feedback=weights.feedback
    )


def _archive_lists(
    tenant: Tenant,
    query: SearchQuery,
    vector: np.ndarray | None,
    text: str | None,
    k: int,
    layers: tuple[str, ...],
) -> Lists:
    return archive.search(
        str(tenant.id),
        vector=vector,
        text=text,
        scope=query.scope.replace(layers=layers),
        k=k,
        raw_turns=_settings(tenant).search_packed_turns,
    )


def record_access(
    *, tenant: Tenant, episode_ids: list[int], now: datetime, traversed: list[int] | None = None
) -> None:
    """Count a use now, without read-modify-write: one UPDATE adds to the counters and bumps the
    version, so a migration in flight sees the touch and abandons (seed 001). The API's search
    queues its uses instead (`usage.recorder`), to be written after the answer."""
    if episode_ids or traversed:
        usage.record(tenant.id, episode_ids, now, traversed or ())


# --- shaping ---------------------------------------------------------------------------------------
def search_shaped(
    *,
    tenant: Tenant,
    query: SearchQuery,
    now: datetime,
    may_unpack: bool = True,
    found: Callable[[list[int]], object] | None = None,
) -> dict[str, Any]:
    """``POST /search``: each hit in its layer's shape (``episodes.shapes.hit``). ``depth=deep``
    shows every hit whole and, when ``may_unpack`` (a key with the write scope), unpacks the warm
    and cold hits (back to hot); without it they are read whole where they are. ``found`` is told
    the hits' internal ids (to record their uses)."""
    result = search(tenant=tenant, query=query, now=now)
    if found is not None:
        found([h.episode.pk for h in result.hits])
    deep = query.depth == "deep"
    if deep and may_unpack:
        for hit in result.hits:
            if hit.episode.layer != Layer.HOT:
                unpack(tenant=tenant, episode_id=hit.episode.pk, now=now, record=False)
    return {
        "results": hit_bodies(tenant, result.hits, deep=deep),
        "degraded": result.degraded,
        "degraded_reason": result.reason or None,
        "stale": result.stale,
        "took_ms": round(result.took_ms, 2),
    }


def hit_bodies(tenant: Tenant, hits: list[Hit], *, deep: bool) -> list[dict[str, Any]]:
    """The hits as ``POST /search`` shows them (``episodes.shapes.hit``), their turns read at once."""
    ids = [h.episode.pk for h in hits]
    full = {h.episode.pk for h in hits if shapes.shows_turns(h.episode, deep=deep)}
    turns = turns_for(tenant, ids, full=full)
    return [
        shapes.hit(
            h.episode,
            score=h.score,
            turns=turns.get(h.episode.pk, []),
            matched=h.matched,
            deep=deep,
            explain=h.explain,
            similarity=h.similarity,
        )
        for h in hits
    ]


# --- activation (seed 000) ------------------------------------------------------------------------
def activate(
    *,
    tenant: Tenant,
    kind: str,
    query_text: str,
    limit: int,
    now: datetime,
    scope: Scope | None = None,
) -> dict[str, Any]:
    """Top active memories of one event type: by relevance when a query is given, else by the
    tenant's seed-003 priority (recency, frequency, anchor)."""
    scope = (scope or Scope()).replace(kinds=(kind,), states=(State.ACTIVE,))
    if query_text.strip():
        return search_shaped(
            tenant=tenant, query=SearchQuery(text=query_text, scope=scope, limit=limit), now=now
        )
    candidates = list(
        Episode.objects.for_tenant(tenant).filter(scope.q()).order_by("-anchor", "-last_accessed_at")[:200]
    )
    policy = _settings(tenant)
    scored = [(scoring.priority(stats_of(e), policy, now), e) for e in candidates]
    scored.sort(key=lambda x: -x[0])
    hits = [Hit(episode=e, relevance=0.0, score=p) for p, e in scored[:limit]]
    record_access(tenant=tenant, episode_ids=[h.episode.pk for h in hits], now=now)
    return {"results": hit_bodies(tenant, hits, deep=False), "degraded": False}


# --- feedback -------------------------------------------------------------------------------------
def feedback(*, tenant: Tenant, used: list[int], unused: list[int], now: datetime) -> dict[str, int]:
    """Which returned memories the agent used. Used ones count as an access; unused ones are a
    `Hard` review for FSRS (applied by the lifecycle)."""
    known = set(
        Episode.objects.for_tenant(tenant).visible().filter(pk__in=used + unused).values_list("pk", flat=True)
    )
    missing = sorted(set(used + unused) - known)
    if missing:
        raise EpisodeNotFound(missing[0])
    record_access(tenant=tenant, episode_ids=used, now=now)
    feedback_review(tenant=tenant, used=used, unused=unused, now=now)
    return {"used": len(used), "unused": len(unused)}
