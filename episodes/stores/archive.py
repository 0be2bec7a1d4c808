"""Warm and cold search in Postgres: pgvector HNSW (iterative scan) and full text, tenant-scoped.

Also serves every layer when Redis is down (degraded mode). The tenant filter is part of every
statement built here.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from django.db import connection

from episodes.models import Layer
from memory_platform import db
from memory_platform.ttl_cache import ttl_cached

from ..scope import ALL_LAYERS, Scope
from .tables import EPISODES, TURNS

# Up to this many packed turns, a tenant's warm/cold search is exact (see `search`); the exact
# plan's cost grows with the tenant's packed turns. Above it, a filtered scan of the shared HNSW
# graphs reaches the tenant's rows; a filtered scan stops after hnsw.max_scan_tuples rows, so in
# much larger graphs raise this threshold or that setting (docs/decisions/0005).
EXACT_PACKED_TURNS = 2000
PACKED_COUNT_TTL = 60.0
# Each full-text pass (see `search`) ranks at most this many matches: on the approximate plan,
# and on the exact plan (a small tenant, whose matches are few).
TEXT_CANDIDATES = 300
TEXT_CANDIDATES_EXACT = 1000
# Packed turns ranked by vector, per wanted episode (several may share one episode).
PACKED_TURNS_PER_EPISODE = 1

_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="archive-search")
_packed_count_cache: dict[str, tuple[float, Any]] = {}


# The query's lexemes: all of them (NULL when it has none) ...
_ALL_WORDS_QUERY = "(SELECT plainto_tsquery('english', %s) AS query)"
# ... any one of them ...
_ANY_WORD_QUERY = (
    "(SELECT NULLIF(string_agg(quote_literal(l), ' | '), '')::tsquery AS query "
    "FROM unnest(tsvector_to_array(to_tsvector('english', %s))) l)"
)
# ... or any two of them (NULL when it has fewer than two).
_TWO_WORDS_QUERY = (
    "(SELECT NULLIF(string_agg(quote_literal(a) || ' & ' || quote_literal(b), ' | '), '')::tsquery AS query "
    "FROM (SELECT tsvector_to_array(to_tsvector('english', %s)) AS ls) x, unnest(x.ls) a, unnest(x.ls) b "
    "WHERE a < b)"
)


def packed_turns(tenant_id: str) -> int:
    """How many packed turns the tenant has (partial index `turn_packed_tenant`); cached per
    process for a minute: it only decides between an exact and an approximate plan."""

    def compute() -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {TURNS} WHERE tenant_id = %s AND packed", [tenant_id])
            return int(cursor.fetchone()[0])

    return int(ttl_cached(_packed_count_cache, tenant_id, PACKED_COUNT_TTL, compute))


def holds(tenant_id: Any, layers: tuple[str, ...]) -> bool:
    """Whether the tenant has any episode in these layers (any state).

    Not ``EXISTS (...)``: a tenant the planner's statistics do not know yet (just loaded, or
    autovacuum has not analysed since) is estimated to hold thousands of such rows, so it
    scans the table for the first one. Ordering by the `(tenant, layer)` index's own columns
    makes the index the only cheap plan, an index-only scan (docs/decisions/0005)."""
    row = db.fetch_one(
        f"SELECT layer FROM {EPISODES} WHERE tenant_id = %s AND layer = ANY(%s) ORDER BY tenant_id, layer LIMIT 1",
        [tenant_id, list(layers)],
    )
    return row is not None


def search(
    tenant_id: str,
    *,
    vector: np.ndarray | None,
    text: str | None,
    scope: Scope,
    k: int,
    raw_turns: bool = True,
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(vector hits, text hits) as (episode id, similarity or rank) lists, best first: one
    statement, or two at the same time on two connections outside a transaction.

    Two plans, by the tenant's size. Up to EXACT_PACKED_TURNS packed turns, everything is exact
    and complete: packed turns and episode centroids ranked by true distance, full text over
    every lexeme. Above, the approximate indexes: the partial HNSW graphs (with
    `hnsw.iterative_scan`, set for every connection), and full text over rows holding any two of
    the query's lexemes rather than any one (see below). An HNSW graph is shared by all tenants,
    so a small tenant's rows are a sliver of it that a filtered scan may never reach: small
    tenants are never searched through it.
    """
    layers = scope.layers or ALL_LAYERS
    if vector is None and not (text and text.strip()):
        return [], []
    where, params = scope.sql("e")
    where = f"e.tenant_id = %s AND {where}"
    params = [tenant_id, *params]
    exact = packed_turns(tenant_id) <= EXACT_PACKED_TURNS
    # Episode centroids and shapes: the seeds' "small index" of packed episodes, and hot episodes
    # when Redis is down (degraded mode; hot turns are not `packed`). With raw turns searched
    # too, the approximate plan leaves them out: the turns cover what they say.
    shapes = not raw_turns or exact or Layer.HOT in layers
    # "+ 0" keeps the planner off the HNSW index where the ranking must be exact.
    distance = "+ 0" if exact else ""
    vector_parts: list[str] = []
    vector_args: list = []
    text_parts: list[str] = []
    text_args: list = []
    text = text if text and text.strip() else None
    if vector is not None:
        literal = db.Vector(vector)
        if raw_turns:
            # The turns of packed episodes keep their own embeddings (the raw log is never
            # packed), and a centroid blurs the one turn a question is about: rank the packed
            # turns (`packed`, migration 0008), each episode by its best turn.
            vector_parts.append(
                f"(SELECT 'v' AS src, s.episode_id AS id, max(s.sim) AS score FROM (SELECT t.episode_id, "
                f"1 - (t.embedding <=> %s::vector) AS sim FROM {TURNS} t JOIN {EPISODES} e "
                f"ON e.id = t.episode_id WHERE t.packed AND t.embedding IS NOT NULL AND t.tenant_id = %s "
                f"AND {where} ORDER BY (t.embedding <=> %s::vector) {distance} LIMIT %s) s GROUP BY s.episode_id)"
            )
            vector_args.extend(
                [literal, tenant_id, *params, literal, (4 if exact else PACKED_TURNS_PER_EPISODE) * k]
            )
        if shapes:
            vector_parts.append(
                f"(SELECT 'c' AS src, e.id, 1 - (e.embedding <=> %s::vector) AS score FROM {EPISODES} e "
                f"WHERE {where} AND e.embedding IS NOT NULL ORDER BY (e.embedding <=> %s::vector) {distance} "
                f"LIMIT %s)"
            )
            vector_args.extend([literal, *params, literal, k])
    if text is not None:
        # Full text in two passes: every match of all the query's lexemes, ranked; then, because
        # a question rarely shares every word with its answer, a broad pass. Each ranks at most
        # `cap` matches, taken as the index finds them (unranked); all-words hits come first. A
        # small tenant's broad pass is any word: its matches are few and all ranked. In a large
        # tenant one common word matches thousands of rows, of which the cap would keep an
        # arbitrary few, so its broad pass is any two words: rows sharing two of the question's
        # words are fewer and likelier its answer. The broad pass ranks with `ts_rank`, not
        # `ts_rank_cd`, whose cover search over an OR of every pair of words is slow
        # (docs/decisions/0005).
        broad = _ANY_WORD_QUERY if exact else _TWO_WORDS_QUERY
        cap = TEXT_CANDIDATES_EXACT if exact else TEXT_CANDIDATES
        # (The all-words passes are capped too: a question left with one common word after its
        # stopwords matches a large share of a big tenant.)
        # The episodes' own text (summary, key points, headline): all words; the broad pass only
        # where their shapes are searched.
        episode_passes = [("a", _ALL_WORDS_QUERY, "ts_rank_cd")]
        if shapes:
            episode_passes.append(("b", broad, "ts_rank"))
        for src, query, rank in episode_passes:
            text_parts.append(
                f"(SELECT '{src}' AS src, c.id, {rank}(c.search_vector, q.query) AS score FROM {query} q, "
                f"LATERAL (SELECT e.id, e.search_vector FROM {EPISODES} e WHERE q.query IS NOT NULL "
                f"AND e.search_vector @@ q.query AND {where} LIMIT %s) c ORDER BY score DESC LIMIT %s)"
            )
            text_args.extend([text, *params, cap, k])
        if raw_turns:
            # The raw turns of packed episodes, each episode by its best turn.
            for src, query, rank in (("ta", _ALL_WORDS_QUERY, "ts_rank_cd"), ("tb", broad, "ts_rank")):
                text_parts.append(
                    f"(SELECT '{src}' AS src, s.episode_id AS id, max(s.rank) AS score FROM (SELECT t.episode_id, "
                    f"{rank}(t.search_vector, q.query) AS rank FROM {query} q, {TURNS} t "
                    f"JOIN {EPISODES} e ON e.id = t.episode_id WHERE q.query IS NOT NULL AND t.packed "
                    f"AND t.tenant_id = %s AND t.search_vector @@ q.query AND {where} LIMIT %s) s "
                    f"GROUP BY s.episode_id ORDER BY score DESC LIMIT %s)"
                )
                text_args.extend([text, tenant_id, *params, cap, k])
    if vector_parts and text_parts and not connection.in_atomic_block:
        # Two statements on two connections at once: the vector half in a worker thread. Not
        # inside a transaction, whose own writes only its connection can see.
        future = _pool.submit(db.in_worker, db.fetch, " UNION ALL ".join(vector_parts), vector_args)
        rows = db.fetch(" UNION ALL ".join(text_parts), text_args) + future.result()
    elif vector_parts or text_parts:
        rows = db.fetch(" UNION ALL ".join(vector_parts + text_parts), vector_args + text_args)
    else:
        return [], []
    by_source: dict[str, list[tuple[int, float]]] = {}
    for src, i, sc in rows:
        by_source.setdefault(src, []).append((int(i), float(sc)))
    best: dict[int, float] = {}
    for i, sc in by_source.get("v", []) + by_source.get("c", []):
        best[i] = max(best.get(i, -1.0), sc)
    vector_hits = sorted(best.items(), key=lambda x: -x[1])[:k]
    for hits in by_source.values():
        hits.sort(key=lambda x: -x[1])
    text_hits = []
    seen: set[int] = set()
    # Raw-turn matches rank first when searched (a turn is where a question's words are),
    # all words before the broad pass; then the shape's.
    for src in ("ta", "tb", "a", "b"):
        for i, sc in by_source.get(src, []):
            if i not in seen:
                seen.add(i)
                text_hits.append((i, sc))
    return vector_hits, text_hits[:k]
