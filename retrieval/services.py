"""The read path: hybrid search over every tier, activation, context assembly, unpacking.

One query embedding; hot candidates from Redis (BM25 over turns, then KNN with the query moved
towards the best BM25 hits), warm and cold candidates from Postgres (pgvector + full text);
weighted RRF; grouped by episode; re-ranked by the seed-003 priority; each hit shaped by its layer.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
from django.db import connection

from episodes import selectors as episode_selectors
from episodes.models import Episode, Layer, State
from episodes.services import EpisodeNotFound
from episodes.stores import archive
from episodes.stores.hot import Feedback, HotFilters, HotUnavailable, hot_store
from memory_platform import db
from memory_platform.conf import memory_settings
from memory_platform.embeddings import EmbeddingError, get_embedder
from memory_platform.tenancy.models import Tenant

from . import usage
from .fusion import weighted_rrf
from .query import SearchQuery
from .ranking import RetrievalWeights, priority_parts, rank_candidates, rerank

logger = logging.getLogger(__name__)

_hot_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hot-search")


def _settings(tenant: Tenant):  # type: ignore[no-untyped-def]
    """The policy's search settings, read once per tenant object (one request, one command run)."""
    cached = getattr(tenant, "_search_settings", None)
    if cached is None:
        from lifecycle.selectors import search_settings

        cached = search_settings(tenant)
        tenant._search_settings = cached  # type: ignore[attr-defined]
    return cached


def activation_limit(tenant: Tenant) -> int:
    return int(_settings(tenant).activation_limit)


def platform_weights() -> RetrievalWeights:
    """The fusion and candidate settings of the platform (``MEMORY``), before any policy."""
    return RetrievalWeights(
        vector=float(memory_settings.RRF_VECTOR_WEIGHT),
        text=float(memory_settings.RRF_TEXT_WEIGHT),
        k=int(memory_settings.RRF_K),
        candidates=int(memory_settings.SEARCH_CANDIDATES),
        feedback=Feedback(
            docs=int(memory_settings.SEARCH_FEEDBACK_DOCS),
            weight=float(memory_settings.SEARCH_FEEDBACK_WEIGHT),
        ),
    )


def default_weights(tenant: Tenant) -> RetrievalWeights:
    """The tenant's policy decides the fusion (seed 004 defaults: 0.7 / 0.3, k 60)."""
    settings = _settings(tenant)
    return dataclasses.replace(
        platform_weights(), vector=settings.rrf_vector_weight, text=settings.rrf_text_weight, k=settings.rrf_k
    )


@dataclass
class Hit:
    episode: Episode
    relevance: float
    score: float = 0.0
    matched: list[tuple[int, float]] = field(default_factory=list)  # (turn id, fused score)
    explain: dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchResult:
    hits: list[Hit]
    degraded: bool
    took_ms: float
    query_vector: np.ndarray | None = None

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
    weights = weights or default_weights(tenant)
    k = max(weights.candidates, query.limit * 3)
    degraded = False
    hot_turns: dict[int, list[tuple[int, float]]] = {}
    episode_relevance: dict[int, float] = {}
    explain: dict[int, dict[str, Any]] = {}

    layers = tuple(query.layers)
    archive_layers = tuple(layer for layer in layers if layer != Layer.HOT)
    if archive_layers and not archive.holds(tenant.pk, archive_layers):
        # Nothing packed yet (a young tenant): the two warm/cold statements would find nothing,
        # and planning them costs more than this look at the (tenant, layer) index.
        archive_layers = ()
    search_hot = Layer.HOT in layers
    text = query.text if query.text.strip() else None
    # The query is embedded first. (Running the text halves while it was embedded was slower on
    # 2 cores: the model's threads and the searches took the same cores, 42 ms p50 against 36.)
    vector = query_vector(tenant, query)
    # Redis answers in a worker thread while Postgres answers here: the two tiers are searched at
    # the same time (the database connection stays on this thread, inside its transaction).
    hot_future = _hot_pool.submit(_hot_lists, tenant, query, vector, text, k, weights) if search_hot else None
    archive_hits = (
        _fuse_archive(_archive_lists(tenant, query, vector, text, k, archive_layers), weights)
        if archive_layers
        else {}
    )
    if hot_future is not None:
        try:
            # A Redis still loading its data answers LOADING, which redis-py raises as
            # BusyLoadingError (a RedisError): it lands in the degraded branch below like an outage.
            hot_turns, hot_explain = _fuse_hot(hot_future.result(), weights)
            explain.update(hot_explain)
            for episode_id, turns in hot_turns.items():
                episode_relevance[episode_id] = turns[0][1]
        except HotUnavailable as exc:
            logger.warning("hot tier unavailable, answering from Postgres: %s", exc)
            degraded = True
            archive_hits = _fuse_archive(_archive_lists(tenant, query, vector, text, k, layers), weights)

    for episode_id, (score, parts) in archive_hits.items():
        if score > episode_relevance.get(episode_id, 0.0):
            episode_relevance[episode_id] = score
            explain[episode_id] = parts

    # Ranking reads five columns of every candidate; only the hits kept are loaded whole. (Reading
    # every candidate whole in one statement was slower: building 30 Episode objects costs 1.2 ms.)
    ranked = rank_candidates(tenant, episode_relevance, query.limit, weights)
    if degraded and vector is not None:
        hot_ids = [pk for pk, row in ranked.items() if row.layer == Layer.HOT]
        for episode_id, sims in archive.turn_similarities(hot_ids, vector).items():
            base = episode_relevance[episode_id]
            hot_turns[episode_id] = [(t, base * (0.5 + 0.5 * max(s, 0.0))) for t, s in sims[:5]]

    order = rerank(ranked, episode_relevance, weights, now)[: query.limit]
    columns, names = _hit_columns()
    rows = db.fetch(
        f"SELECT {columns} FROM episodes_episode WHERE tenant_id = %s AND id = ANY(%s) AND state <> %s",
        [tenant.id, [pk for pk, _, _ in order], State.FORGOTTEN.value],
    )
    episodes = {e.pk: e for e in (Episode.from_db(connection.alias, names, row) for row in rows)}
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
    if query.record_access and hits:
        record_access(tenant=tenant, episode_ids=[h.episode.pk for h in hits], now=now)
    return SearchResult(
        hits=hits, degraded=degraded, took_ms=(time.perf_counter() - started) * 1000, query_vector=vector
    )


# (vector hits, text hits) of one tier, best first.
Lists = tuple[list[Any], list[Any]]


def _hot_lists(
    tenant: Tenant,
    query: SearchQuery,
    vector: np.ndarray | None,
    text: str | None,
    k: int,
    weights: RetrievalWeights,
) -> Lists:
    filters = HotFilters(
        user_id=query.user_id,
        agent_id=query.agent_id,
        session_id=query.session_id,
        kinds=query.kinds,
        tags=query.tags,
        occurred_from=query.occurred_from.timestamp() if query.occurred_from else None,
        occurred_to=query.occurred_to.timestamp() if query.occurred_to else None,
        exclude_dormant=not query.include_dormant,
    )
    return hot_store().search(
        tenant.id.hex, vector=vector, text=text, filters=filters, k=k, feedback=weights.feedback
    )


def _fuse_hot(
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


def _archive_lists(
    tenant: Tenant,
    query: SearchQuery,
    vector: np.ndarray | None,
    text: str | None,
    k: int,
    layers: tuple[str, ...],
) -> Lists:
    filters = archive.ArchiveFilters(
        layers=layers,
        user_id=query.user_id,
        agent_id=query.agent_id,
        session_id=query.session_id,
        kinds=query.kinds,
        tags=query.tags,
        occurred_from=query.occurred_from,
        occurred_to=query.occurred_to,
        include_dormant=query.include_dormant,
        raw_turns=_settings(tenant).search_packed_turns,
    )
    return archive.search(str(tenant.id), vector=vector, text=text, filters=filters, k=k)


def _fuse_archive(lists: Lists, weights: RetrievalWeights) -> dict[int, tuple[float, dict[str, Any]]]:
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


def record_access(
    *, tenant: Tenant, episode_ids: list[int], now: datetime, traversed: list[int] | None = None
) -> None:
    """Count a use now, without read-modify-write: one UPDATE adds to the counters and bumps the
    version, so a migration in flight sees the touch and abandons (seed 001). The API's search
    queues its uses instead (`usage.recorder`), to be written after the answer."""
    if episode_ids or traversed:
        usage.record(tenant.id, episode_ids, now, traversed or ())


# --- shaping ---------------------------------------------------------------------------------------
def hit_shape(hit: Hit, turns_by_episode: dict[int, list[TurnRow]], deep: bool) -> dict[str, Any]:
    episode = hit.episode
    body: dict[str, Any] = {
        "episode_id": episode.pk,
        "layer": episode.layer,
        "kind": episode.kind,
        "title": episode.title,
        "score": round(hit.score, 6),
        "anchor": episode.anchor,
        "state": episode.state,
        "scope": {"user_id": episode.user_id, "agent_id": episode.agent_id, "session_id": episode.session_id},
        "first_occurred_at": episode.first_occurred_at.isoformat(),
        "last_occurred_at": episode.last_occurred_at.isoformat(),
        "entities": episode.entities,
        "decisions": episode.decisions,
        "unpack": f"/api/v1/memories/{episode.pk}/unpack",
    }
    turns = turns_by_episode.get(episode.pk, [])
    body["turn_ids"] = [t.pk for t in turns]
    if episode.layer == Layer.HOT or deep:
        body["turns"] = [episode_selectors.turn_shape(t) for t in turns]
    if episode.layer == Layer.HOT:
        body["matched_turn_ids"] = [t for t, _ in hit.matched]
    elif episode.layer == Layer.WARM:
        body.update(summary=episode.summary, key_points=episode.key_points, partial=not deep)
    else:
        body.update(
            headline=episode.headline,
            tags=list(dict.fromkeys(episode.tags + episode.keywords)),
            index_only=not deep,
        )
    if hit.explain:
        body["explain"] = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in hit.explain.items()}
    return body


class TurnRow(NamedTuple):
    """The fields of a turn a response shows (no vectors, no search text)."""

    pk: int
    episode_id: int
    seq: int
    role: str = ""
    text: str = ""
    occurred_at: datetime | None = None
    metadata: dict[str, Any] | None = None


def turns_for(episode_ids: list[int], *, full: set[int]) -> dict[int, list[TurnRow]]:
    """Turns per episode, in order, in one statement: every shown field for ``full`` episodes,
    ids only for the others (their text stays in the database)."""
    out: dict[int, list[TurnRow]] = {e: [] for e in episode_ids}
    if not episode_ids:
        return out
    rows = db.fetch(
        "SELECT id, episode_id, seq, s.shown, role, CASE WHEN s.shown THEN text END, occurred_at, "
        "CASE WHEN s.shown THEN metadata END FROM episodes_turn, LATERAL (SELECT episode_id = ANY(%s) AS shown) s "
        "WHERE episode_id = ANY(%s) ORDER BY episode_id, seq, id",
        [list(full), episode_ids],
    )
    for pk, episode_id, seq, shown, role, text, occurred_at, metadata in rows:
        turn = (
            TurnRow(pk, episode_id, seq, role, text, occurred_at, metadata or {})
            if shown
            else TurnRow(pk, episode_id, seq)
        )
        out[episode_id].append(turn)
    return out


@functools.cache
def _hit_columns() -> tuple[str, list[str]]:
    """An episode's columns as a hit shows it (vectors, search text and metadata stay behind),
    and their field names."""
    left_out = {"embedding", "search_text", "search_vector", "metadata"}
    fields = [f for f in Episode._meta.concrete_fields if f.attname not in left_out]
    return db.column_list(fields), [f.attname for f in fields]


def search_shaped(*, tenant: Tenant, query: SearchQuery, now: datetime) -> dict[str, Any]:
    result = search(tenant=tenant, query=query, now=now)
    deep = query.depth == "deep"
    if deep:
        from .unpack import unpack

        for hit in result.hits:
            if hit.episode.layer != Layer.HOT:
                unpack(tenant=tenant, episode_id=hit.episode.pk, now=now, record=False)
    ids = [h.episode.pk for h in result.hits]
    full = {h.episode.pk for h in result.hits if h.episode.layer == Layer.HOT or deep}
    turns = turns_for(ids, full=full)
    return {
        "results": [hit_shape(h, turns, deep) for h in result.hits],
        "degraded": result.degraded,
        "took_ms": round(result.took_ms, 2),
    }


# --- activation (seed 000) ------------------------------------------------------------------------
def activate(
    *,
    tenant: Tenant,
    kind: str,
    query_text: str,
    limit: int,
    now: datetime,
    scope: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    """Top memories of one event type, by score: by relevance when a query is given, else by
    priority (recency, frequency, anchor)."""
    scope = scope or {}
    if query_text.strip():
        return search_shaped(
            tenant=tenant,
            query=SearchQuery(text=query_text, kinds=(kind,), limit=limit, **scope),  # type: ignore[arg-type]
            now=now,
        )
    qs = Episode.objects.for_tenant(tenant).filter(kind=kind, state=State.ACTIVE)
    for name, value in scope.items():
        if value is not None:
            qs = qs.filter(**{name: value})
    candidates = list(qs.order_by("-anchor", "-last_accessed_at")[:200])
    ranked = sorted(candidates, key=lambda e: -sum(priority_parts(e, now).values()))[:limit]
    hits = [Hit(episode=e, relevance=0.0, score=sum(priority_parts(e, now).values())) for e in ranked]
    record_access(tenant=tenant, episode_ids=[e.pk for e in ranked], now=now)
    ids = [e.pk for e in ranked]
    turns = turns_for(ids, full={e.pk for e in ranked if e.layer == Layer.HOT})
    return {"results": [hit_shape(h, turns, False) for h in hits], "degraded": False}


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
    from lifecycle.services import feedback_review

    feedback_review(tenant=tenant, used=used, unused=unused, now=now)
    return {"used": len(used), "unused": len(unused)}
