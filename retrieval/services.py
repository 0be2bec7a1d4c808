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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from django.db import connection

from episodes import shapes
from episodes.models import Episode, Layer, State
from episodes.scope import ALL_LAYERS, Scope
from episodes.services import EpisodeNotFound
from episodes.stores import archive, rows
from episodes.stores.hot import HotUnavailable, hot_store, moved_towards, unavailable_reason
from episodes.stores.hot_replies import HotHit
from episodes.stores.rows import turns_for
from lifecycle import scoring
from lifecycle.selectors import SearchSettings, search_settings
from lifecycle.services import feedback_review
from memory_platform import counters, db
from memory_platform.embeddings import EmbeddingError, embedder_for
from memory_platform.tenancy.models import Tenant

from . import hops, usage, when
from .query import SearchQuery
from .ranking import (
    Fusion,
    Match,
    RetrievalWeights,
    fuse,
    interleaved,
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
    #: The hits reached by a hop from another (``retrieval.hops``): a use of them is a traversal.
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


def query_vector(tenant: Tenant, query: SearchQuery) -> tuple[np.ndarray | None, str]:
    """The query's vector (the caller's, or the tenant's embedder's), and why there is none
    when the embedder failed ("" otherwise): the search then answers from full text, degraded."""
    if query.text_only:
        return None, ""
    if query.vector is not None:
        return query.vector, ""
    embedder = embedder_for(tenant)
    if not embedder.computes or not query.text.strip():
        return None, ""
    try:
        return embedder.embed_one(query.text), ""
    except EmbeddingError as exc:
        logger.warning("query embedding failed, searching text only: %s", exc)
        return None, f"{exc}; answered from full text"


def search(
    *, tenant: Tenant, query: SearchQuery, now: datetime, weights: RetrievalWeights | None = None
) -> SearchResult:
    started = time.perf_counter()
    window = query.scope.occurred_from, query.scope.occurred_to
    if window[0] is not None and window[1] is not None and window[0] > window[1]:
        return SearchResult(hits=[], degraded=False, took_ms=0.0)  # a window that ends before it starts
    weights = weights or tenant_weights(_settings(tenant))
    k = max(weights.candidates, query.limit * 3)
    layers = query.scope.layers or ALL_LAYERS
    archive_layers = tuple(layer for layer in layers if layer != Layer.HOT)
    if archive_layers and not archive.holds(tenant.pk, archive_layers):
        # Nothing packed yet (a young tenant): the warm/cold statements would find nothing,
        # and planning them costs more than this look at the (tenant, layer) index.
        archive_layers = ()
    search_hot = Layer.HOT in layers
    # Hot episodes the index missed (Redis was down or full, or a write a moment old) are searched
    # in Postgres until the repair has indexed them.
    missed = _narrow(rows.hot_index_stale(tenant), query.scope.episode_ids) if search_hot else []
    outage = False
    text = query.text if query.text.strip() else None
    # The query is embedded first: on 2 cores the model's threads and concurrent searches would
    # take the same cores (docs/decisions/0004).
    vector, reason = query_vector(tenant, query)
    degraded = bool(reason)
    tiers = _Tiers(tenant, query, k, weights, hot=search_hot, archive_layers=archive_layers, missed=missed)
    try:
        fusion = tiers.fuse(vector, text)
    except HotUnavailable as exc:
        # A Redis still loading its data answers LOADING, which redis-py raises as
        # BusyLoadingError (a RedisError): it lands here like an outage.
        logger.warning("hot tier unavailable, answering from Postgres: %s", exc)
        degraded = outage = True
        reason = "; ".join(filter(None, [reason, f"{unavailable_reason(exc)}; answered from Postgres"]))
        tiers = _Tiers(tenant, query, k, weights, hot=False, archive_layers=tuple(layers), missed=[])
        fusion = tiers.fuse(vector, text)
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

    # Ranking reads a few columns of every candidate; only the hits kept are loaded whole
    # (building model objects for every candidate costs more than the statements).
    # A time the query names lifts the episodes of that time (never a filter).
    timed = when.windows(query.text, now) if weights.time and query.text else []
    ranked = rank_candidates(tenant, episode_relevance, query.limit, weights, timed)
    if degraded and vector is not None:
        hot_ids = [pk for pk, row in ranked.items() if row.layer == Layer.HOT]
        for episode_id, sims in rows.turn_similarities(tenant, hot_ids, vector).items():
            base = episode_relevance[episode_id]
            matched[episode_id] = [(t, base * (0.5 + 0.5 * max(s, 0.0))) for t, s in sims[:5]]

    order = rerank(ranked, episode_relevance, weights, _settings(tenant), now, timed)[: query.limit]
    episodes = rows.hit_episodes(tenant, [pk for pk, _, _ in order])
    hits = []
    for pk, score, parts in order:
        if pk not in episodes:  # forgotten since it was ranked
            continue
        hit = Hit(
            episode=episodes[pk], relevance=episode_relevance[pk], score=score, matched=matched.get(pk, [])
        )
        if query.explain:
            hit.explain = {**explain.get(pk, {}), **parts, "score": score}
        hits.append(hit)
    if query.min_score is not None:
        hits = _at_least(tenant, hits, vector, query.min_score)
    traversed = [h.episode.pk for h in hits if h.episode.pk in hopped]
    if query.record_access and hits:
        accessed = [h.episode.pk for h in hits if h.episode.pk not in hopped]
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
        traversed=traversed,
    )


def _count_search(
    tenant: Tenant, hits: list[Hit], took_ms: float, *, outage: bool, hot: bool, packed: bool, degraded: bool
) -> None:
    """The search's path, latency and hits by layer, in the tenant's counters (issue 18)."""
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


class _Tiers:
    """The lists of one search from every tier it reaches, fused once (``ranking.fuse``).

    The tiers are searched at the same time: the hot tier in a worker thread (BM25, then KNN with
    the query moved towards its best matches), the packed turns' vector candidates on a second
    connection, full text in Postgres on this thread's. Then both tiers' vector hits are ranked
    again, by their vectors, for one query vector moved towards the best matches of the merged
    text list (``episodes.stores.hot.Feedback``; docs/decisions/0017)."""

    def __init__(
        self,
        tenant: Tenant,
        query: SearchQuery,
        k: int,
        weights: RetrievalWeights,
        *,
        hot: bool,
        archive_layers: tuple[str, ...],
        missed: list[int],
    ):
        self.tenant, self.k, self.weights, self.hot = tenant, k, weights, hot
        self.raw_turns = _settings(tenant).search_packed_turns
        # Warm and cold episodes, and the hot ones the index missed (by their shapes).
        self.archive_scopes = [query.scope.replace(layers=archive_layers)] if archive_layers else []
        if missed:
            self.archive_scopes.append(query.scope.replace(layers=(Layer.HOT,), episode_ids=tuple(missed)))
        self.scope = query.scope
        # The share of the tenant's turns in warm and cold, which weighs the tiers' text lists.
        self.packed_share = 0.0
        if self.archive_scopes and hot:
            total, packed = archive.turn_counts(str(tenant.id))
            self.packed_share = packed / total if total else 0.0
        elif self.archive_scopes:
            self.packed_share = 1.0

    def fuse(self, vector: np.ndarray | None, text: str | None) -> Fusion:
        tenant_id = str(self.tenant.id)
        words = text or ""
        # At once: the hot tier's search in a worker thread (BM25, then KNN with the query moved
        # towards its best matches), the packed turns' vector candidates for the query as it came
        # on another (on its own connection, outside a transaction), and full text in Postgres here.
        hot = _hot_pool.submit(self._hot, vector, text) if self.hot and self.archive_scopes else None
        apart = vector is not None and bool(self.archive_scopes) and not connection.in_atomic_block
        pending = _hot_pool.submit(db.in_worker, self._candidates, vector) if apart else None
        archive_text = [
            hit
            for scope in (self.archive_scopes if text is not None else [])
            for hit in archive.text_search(
                tenant_id, text=words, scope=scope, k=self.k, raw_turns=self.raw_turns
            )
        ]
        if pending is not None:
            candidates = pending.result()
        else:
            candidates = self._candidates(vector) if vector is not None and self.archive_scopes else []
        if hot is not None:
            hot_text, hot_vector, hot_found = hot.result()
        elif self.hot:
            hot_text, hot_vector, hot_found = self._hot(vector, text)  # no other tier: no hand-over
        else:
            hot_text, hot_vector, hot_found = [], [], {}
        text_list = interleaved([(hot_text, 1.0 - self.packed_share), (archive_text, self.packed_share)])
        if vector is None:
            return fuse([], text_list, self.weights)
        if not self.archive_scopes:
            return fuse(hot_vector, text_list, self.weights)
        # Both tiers compared with one vector: the query moved towards the best full-text matches
        # of either tier. The hot KNN found its turns with the query moved by its own matches; they
        # and the packed candidates are ranked again here, by their vectors.
        moved = self._moved(vector, text_list, hot_found, candidates)
        both: list[Match] = [*hot_vector, *candidates]
        ranked = archive.rescored(both, moved, 2 * self.k)
        return fuse(ranked, text_list, self.weights)

    def _hot(
        self, vector: np.ndarray | None, text: str | None
    ) -> tuple[list[HotHit], list[HotHit], dict[str, np.ndarray]]:
        """The hot tier's (text hits, vector hits, the vectors of the text hits its query moved
        towards); its vector hits carry their vectors when a packed tier is searched too."""
        vector_hits, text_hits, found = hot_store().search(
            self.tenant.id.hex,
            vector=vector,
            text=text,
            scope=self.scope,
            k=self.k,
            feedback=self.weights.feedback,
            with_vectors=bool(self.archive_scopes),
        )
        return text_hits, vector_hits, found

    def _candidates(self, vector: np.ndarray) -> list[archive.ArchiveHit]:
        return [
            hit
            for scope in self.archive_scopes
            for hit in archive.vector_candidates(
                str(self.tenant.id), vector=vector, scope=scope, k=self.k, raw_turns=self.raw_turns
            )
        ]

    def _moved(
        self,
        vector: np.ndarray,
        text_list: list[Match],
        hot_found: dict[str, np.ndarray],
        candidates: list[archive.ArchiveHit],
    ) -> np.ndarray:
        feedback = self.weights.feedback
        best = text_list[: feedback.docs]
        if not best:
            return vector
        # The merged list's hot matches are among the hot tier's first ``docs`` text hits, whose
        # vectors its search read (those still there).
        found = [hot_found[m.doc_id] for m in best if isinstance(m, HotHit) and m.doc_id in hot_found]
        # A packed match's vector: from the candidates when it is one, else read.
        known = {(c.episode_id, c.turn_id): c.vector for c in candidates if c.vector is not None}
        packed = [m for m in best if not isinstance(m, HotHit)]
        found += [known[(m.episode_id, m.turn_id)] for m in packed if (m.episode_id, m.turn_id) in known]
        unknown = [m for m in packed if (m.episode_id, m.turn_id) not in known]
        if unknown:
            found += archive.vectors_of(
                str(self.tenant.id),
                [m.turn_id for m in unknown if m.turn_id is not None],
                [m.episode_id for m in unknown if m.turn_id is None],
            )
        return moved_towards(vector, found, feedback.weight)


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
    found: Callable[[list[int], list[int]], object] | None = None,
    snippet: shapes.Snippet | None = None,
) -> dict[str, Any]:
    """``POST /search``: each hit in its layer's shape (``episodes.shapes.hit``), in a ``snippet``
    (by default the platform's) unless ``depth=deep``, which shows every hit whole and, when
    ``may_unpack`` (a key with the write scope), unpacks the warm and cold hits (back to hot);
    without it they are read whole where they are. ``found`` is told
    the hits' internal ids (to record their uses): those found by the lists, and those reached by a
    hop (a traversal)."""
    result = search(tenant=tenant, query=query, now=now)
    if found is not None:
        hopped = set(result.traversed)
        found([h.episode.pk for h in result.hits if h.episode.pk not in hopped], result.traversed)
    deep = query.depth == "deep"
    if deep and may_unpack:
        for hit in result.hits:
            if hit.episode.layer != Layer.HOT:
                unpack(tenant=tenant, episode_id=hit.episode.pk, now=now, record=False)
    return {
        "results": hit_bodies(tenant, result.hits, deep=deep, snippet=snippet, view=query.view),
        "degraded": result.degraded,
        "degraded_reason": result.reason or None,
        "stale": result.stale,
        "took_ms": round(result.took_ms, 2),
    }


def hit_bodies(
    tenant: Tenant,
    hits: list[Hit],
    *,
    deep: bool,
    snippet: shapes.Snippet | None = None,
    view: str = "full",
) -> list[dict[str, Any]]:
    """The hits as ``POST /search`` shows them, their turns read at once: whole with ``deep``, else
    in snippets (``snippet``, by default the platform's); each in its layer's shape
    (``episodes.shapes.hit``) or, with ``view="compact"``, as its text (``shapes.compact_hit``)."""
    ids = [h.episode.pk for h in hits]
    shown = None if deep else (snippet or shapes.Snippet.default())
    full = {h.episode.pk for h in hits if shapes.shows_turns(h.episode, deep=deep)}
    # A packed hit's snippet shows its best matched turns' text.
    texts = (
        []
        if shown is None
        else [t for h in hits if h.episode.pk not in full for t, _ in h.matched[: shown.turns]]
    )
    turns = turns_for(tenant, ids, full=full, texts=texts)
    shape = shapes.compact_hit if view == "compact" else shapes.hit
    return [
        shape(
            h.episode,
            score=h.score,
            turns=turns.get(h.episode.pk, []),
            matched=h.matched,
            snippet=None if shown is None else shown.at(rank),
            explain=h.explain,
            similarity=h.similarity,
        )
        for rank, h in enumerate(hits)
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
            tenant=tenant, query=SearchQuery(text=query_text, scope=scope, limit=limit, view="full"), now=now
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
