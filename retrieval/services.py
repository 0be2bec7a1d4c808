"""The read path: hybrid search over every tier, and what an agent tells of its use (feedback).

One query embedding; hot candidates from Redis (BM25 over turns, then KNN with the query moved
towards the best BM25 hits), warm and cold candidates from Postgres (pgvector + full text);
weighted RRF; grouped by episode; re-ranked by the priority of the tenant's policy
(docs/concepts.md#priority). The hits shaped as answers show them: ``retrieval.shaping``.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TypedDict, cast

import numpy as np
from django.db import connection

from episodes import when
from episodes.language import query_language, query_terms
from episodes.models import Episode, Layer
from episodes.scope import ALL_LAYERS
from episodes.services import EpisodeNotFound
from episodes.shapes import Explain
from episodes.stores import archive, rows
from episodes.stores.hot import HotUnavailable, hot_store, unavailable_reason
from lifecycle.policy_rows import read_policy_beside
from lifecycle.services import feedback_review
from lifecycle.tenant_policy import Policy
from memory_platform import counters, db
from memory_platform.embeddings import Embedder, EmbeddingError, embedder_for
from memory_platform.tenancy.models import Tenant

from . import hops, usage
from .query import SearchQuery
from .ranking import RetrievalWeights, rank_candidates, rerank
from .tiers import Tiers, search_pool
from .weights import tenant_weights

logger = logging.getLogger(__name__)


@dataclass
class Hit:
    episode: Episode
    relevance: float
    score: float = 0.0
    matched: list[tuple[int, float]] = field(default_factory=list)  # (turn id, fused score)
    explain: Explain = field(default_factory=lambda: Explain())
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
    #: Which of the query's words full text left out, and why ("" when none: ``query_terms``).
    narrowed: str = ""
    #: The hits the lists found (a use of them is an access), and those a hop from another reached
    #: (``retrieval.hops``; a use of them is a traversal).
    accessed: list[int] = field(default_factory=list)
    traversed: list[int] = field(default_factory=list)

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
    return embedder_for(tenant).computes


def query_vector(tenant: Tenant, query: SearchQuery, *, ranks: bool = True) -> tuple[np.ndarray | None, str]:
    """The query's vector (the caller's, or the tenant's embedder's), and why there is none
    when the embedder failed ("" otherwise): the search then answers from full text, degraded.
    ``ranks``: whether the vector takes part in the ranking (``_vector_reading``); when it does
    not, the query is embedded only for ``min_score``."""
    if query.text_only:
        return None, ""
    if query.vector is not None:
        return query.vector, ""
    embedder = _embedder_to_run(tenant, query, ranks)
    if embedder is None:
        return None, ""
    try:
        return embedder.embed_one(query.text), ""
    except EmbeddingError as exc:
        logger.warning("query embedding failed, searching text only: %s", exc)
        return None, f"{exc}; answered from full text"


def _embedder_to_run(tenant: Tenant, query: SearchQuery, ranks: bool) -> Embedder | None:
    """The tenant's embedder when the query's text goes through it (``query_vector``): no caller
    vector, an embedder that computes, a text, and a vector that ranks or serves ``min_score``."""
    if query.text_only or query.vector is not None:
        return None
    embedder = embedder_for(tenant)
    if not embedder.computes or not query.text.strip():
        return None
    if not ranks and query.min_score is None:
        return None
    return embedder


def _vector_reading(tenant: Tenant, query: SearchQuery) -> float:
    """How much the query's vector counts in the ranking, as a factor on the vector list's weight:
    a caller's fully; the embedder's as well as it reads the query's language (``Embedder.reads``;
    at 0 full text alone ranks the query, by design: docs/decisions/0034 and 0035)."""
    if query.vector is not None:
        return 1.0
    return embedder_for(tenant).reading(query_language(query.text))


def search(
    *,
    tenant: Tenant,
    query: SearchQuery,
    now: datetime,
    weights: RetrievalWeights | None = None,
    policy: Policy | None = None,
) -> SearchResult:
    """``policy``: the tenant's, when the caller has read it already (read here otherwise)."""
    started = time.perf_counter()
    window = query.scope.occurred_from, query.scope.occurred_to
    if window[0] is not None and window[1] is not None and window[0] > window[1]:
        return SearchResult(hits=[], degraded=False, took_ms=0.0)  # a window that ends before it starts
    layers = query.scope.layers or ALL_LAYERS
    archive_layers = tuple(layer for layer in layers if layer != Layer.HOT)
    search_hot = Layer.HOT in layers
    reading = _vector_reading(tenant, query)
    ranks = reading > 0
    # Read first, in one statement with the policy when the caller has not read it: whether
    # anything is packed (``layers_version``), and the hot episodes the index missed. While the
    # model embeds the query, on a pool thread's own connection (not inside a transaction, whose
    # rows only this thread's connection sees).
    pending = (
        search_pool.submit(db.in_worker, _preamble, tenant, archive_layers, search_hot, policy)
        if _embedder_to_run(tenant, query, ranks) is not None and not connection.in_atomic_block
        else None
    )
    # The query is embedded first: on 2 cores the model's threads and concurrent searches would
    # take the same cores (docs/decisions/0004).
    vector, reason = query_vector(tenant, query, ranks=ranks)
    if pending is not None:
        policy, layers_version, stale = pending.result()
    else:
        policy, layers_version, stale = _preamble(tenant, archive_layers, search_hot, policy)
    weights = weights or tenant_weights(policy)
    k = max(weights.candidates, query.limit * 3)
    if layers_version is None:
        # Nothing packed yet (a young tenant): the warm/cold statements would find nothing,
        # and planning them costs more than this look at the (tenant, layer) index.
        archive_layers = ()
    # Hot episodes the index missed (Redis was down or full, or a write a moment old) are searched
    # in Postgres until the repair has indexed them.
    missed = _narrow(stale, query.scope.episode_ids)
    outage = False
    text = query.text if query.text.strip() else None
    if reading < 1:
        weights = replace(weights, vector=weights.vector * reading)
    degraded = bool(reason)
    ranking = vector if ranks else None  # ``vector`` still serves min_score
    tiers_of = functools.partial(
        Tiers,
        tenant,
        query,
        k,
        weights,
        raw_turns=policy.search_packed_turns,
        layers_version=layers_version,
    )
    tiers = tiers_of(hot=search_hot, archive_layers=archive_layers, missed=missed)
    try:
        fusion = tiers.fuse(ranking, text)
    except HotUnavailable as exc:
        # A Redis still loading its data answers LOADING, which redis-py raises as
        # BusyLoadingError (a RedisError): it lands here like an outage.
        logger.warning("hot tier unavailable, answering from Postgres: %s", exc)
        degraded = outage = True
        reason = "; ".join(filter(None, [reason, f"{unavailable_reason(exc)}; answered from Postgres"]))
        tiers = tiers_of(hot=False, archive_layers=tuple(layers), missed=[])
        fusion = tiers.fuse(ranking, text)
    matched, episode_relevance, explain = fusion.turns, fusion.relevance, fusion.explain
    follow = weights.hops if query.hops is None else query.hops
    hopped = hops.one_hop(tenant, episode_relevance, query.scope, weights.hop_weight) if follow else {}
    for episode_id, hop in hopped.items():
        episode_relevance[episode_id] = hop.relevance
        explain[episode_id] = {
            "source": "hop",
            "hop": {"via": hop.via, "name": hop.name},
            "rrf": hop.relevance,
        }

    # Ranking reads the candidates' rows, with the columns a hit shows; only the hits kept become
    # model objects (building one for every candidate costs more than the statement).
    # A time the query names lifts the episodes of that time (never a filter).
    timed = when.windows(query.text, now) if weights.time and query.text else []
    ranked = rank_candidates(
        functools.partial(rows.rank_rows, tenant), episode_relevance, query.limit, weights, timed
    )
    if degraded and ranking is not None:
        hot_ids = [pk for pk, row in ranked.items() if row.layer == Layer.HOT]
        for episode_id, sims in rows.turn_similarities(tenant, hot_ids, ranking).items():
            base = episode_relevance[episode_id]
            matched[episode_id] = [(t, base * (0.5 + 0.5 * max(s, 0.0))) for t, s in sims[:5]]

    order = rerank(ranked, episode_relevance, weights, policy, now, timed)[: query.limit]
    hits = []
    for pk, score, parts in order:
        hit = Hit(
            episode=rows.hit_episode(ranked[pk]),
            relevance=episode_relevance[pk],
            score=score,
            matched=matched.get(pk, []),
        )
        if query.explain:
            hit.explain = cast(Explain, {**explain.get(pk, {}), **parts, "score": score})
        hits.append(hit)
    if query.min_score is not None:
        hits = _at_least(tenant, hits, vector, query.min_score)
    # A use of a hit the lists found is an access; of one a hop reached, a traversal.
    accessed = [h.episode.pk for h in hits if h.episode.pk not in hopped]
    traversed = [h.episode.pk for h in hits if h.episode.pk in hopped]
    if query.record_access and hits:
        record_access(tenant=tenant, episode_ids=accessed, traversed=traversed, now=now)
    if missed and not degraded:
        refused = hot_store().refusing_writes()
        if refused:
            degraded = True
            reason = f"{refused}; {len(missed)} new hot episode(s) are answered from Postgres until indexed"
    took_ms = (time.perf_counter() - started) * 1000
    _count_search(
        tenant, hits, took_ms, outage=outage, hot=search_hot, packed=bool(archive_layers), degraded=degraded
    )
    return SearchResult(
        hits=hits,
        degraded=degraded,
        took_ms=took_ms,
        query_vector=vector,
        stale=bool(missed) and not outage,
        reason=reason,
        narrowed=query_terms(query.text).narrowed if text else "",
        accessed=accessed,
        traversed=traversed,
    )


def _preamble(
    tenant: Tenant, archive_layers: tuple[str, ...], search_hot: bool, policy: Policy | None
) -> tuple[Policy, int | None, list[int]]:
    """What a search reads before it starts, in one statement: the tenant's policy (unless the
    caller read it), its ``layers_version`` when it has episodes in ``archive_layers`` (None when
    not: nothing packed to search), and the hot episodes the index missed (when hot is searched)."""
    expressions = []
    if archive_layers:
        expressions.append(archive.layers_version_expression(tenant, archive_layers))
    if search_hot:
        expressions.append(rows.hot_index_stale_expression(tenant))
    if policy is None:
        policy, values = read_policy_beside(tenant, expressions)
    else:
        values = db.expression_values(expressions, tenant=tenant)
    found = iter(values)
    version = next(found) if archive_layers else None
    stale = [int(pk) for pk in next(found)] if search_hot else []
    return policy, None if version is None else int(version), stale


def _count_search(
    tenant: Tenant, hits: list[Hit], took_ms: float, *, outage: bool, hot: bool, packed: bool, degraded: bool
) -> None:
    """The search's path, latency and hits by layer, in the tenant's counters (what the console and /metrics read)."""
    path = "postgres" if outage else "tiers" if hot and packed else "packed" if packed else "hot"
    layers: dict[str, int] = {}
    for hit in hits:
        layers[hit.episode.layer] = layers.get(hit.episode.layer, 0) + 1
    counters.write(
        tenant.pk,
        counts=[
            ("searches", {"path": path}, 1),
            ("searches_degraded", {}, int(degraded)),
            *(("hits", {"layer": layer}, n) for layer, n in layers.items()),
        ],
        observations=[("search_ms", {"path": path}, took_ms)],
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


def record_access(
    *, tenant: Tenant, episode_ids: list[int], now: datetime, traversed: list[int] | None = None
) -> None:
    """Count a use now, without read-modify-write: one UPDATE adds to the counters and bumps the
    version, so a migration in flight sees the touch and abandons (docs/concepts.md#halt-on-touch). The API's search
    queues its uses instead (`usage.recorder`), to be written after the answer."""
    if episode_ids or traversed:
        usage.record(tenant.id, episode_ids, now, traversed or ())


# --- feedback -------------------------------------------------------------------------------------
class FeedbackCounts(TypedDict):
    """``POST /feedback``: how many memories were named used and unused."""

    used: int
    unused: int


def feedback(*, tenant: Tenant, used: list[int], unused: list[int], now: datetime) -> FeedbackCounts:
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
