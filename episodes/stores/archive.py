"""Warm and cold search in Postgres: pgvector HNSW (iterative scan) and full text, tenant-scoped.

Also serves every layer when Redis is down (degraded mode). The tenant filter is part of every
statement built here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, cast

import numpy as np

from episodes.language import TEXT_CONFIG, query_text
from episodes.models import Layer
from memory_platform import db
from memory_platform.tenancy.models import Tenant
from memory_platform.ttl_cache import ttl_cached

from ..scope import ALL_LAYERS, Scope
from .tables import EPISODES, TENANTS, TURNS

# Up to this many packed turns, a tenant's warm/cold search is exact (see `_plan`); the exact
# plan's cost grows with the tenant's packed turns. Above it, a filtered scan of the shared HNSW
# graphs reaches the tenant's rows; a filtered scan stops after hnsw.max_scan_tuples rows, so in
# much larger graphs raise this threshold or that setting (docs/decisions/0005).
EXACT_PACKED_TURNS = 2000
# Counting a tenant's turns is a scan that grows with the tenant, too slow to repeat on every
# search. A move between layers has them counted again at once (``turn_counts``); this
# bounds how long what ingest adds goes uncounted (docs/decisions/0032, 0033).
PACKED_COUNT_TTL = 10.0
# Each full-text pass (see `text_search`) ranks at most this many matches: on the approximate plan,
# and on the exact plan (a small tenant, whose matches are few).
TEXT_CANDIDATES = 300
TEXT_CANDIDATES_EXACT = 1000
# Vector candidates per wanted hit, read with their vectors and ranked for the moved query vector
# (``vector_candidates``).
RESCORED = 2

_packed_count_cache: dict[str, tuple[float, tuple[int | None, tuple[int, int]]]] = {}


# The query's lexemes (``language.TEXT_CONFIG``; the query as ``language.query_text`` gives it):
# all of them, any one of them, or any two of them (NULL when there are none, or fewer than two).
# Each is computed while the statement is planned (migration 0025: IMMUTABLE functions of the
# text), so the planner estimates its matches from the column's statistics
# (docs/decisions/0061).
_ALL_WORDS_QUERY = f"(SELECT plainto_tsquery('{TEXT_CONFIG}', %s) AS query)"
_ANY_WORD_QUERY = f"(SELECT episodes_any_word_query('{TEXT_CONFIG}', %s) AS query)"
_TWO_WORDS_QUERY = f"(SELECT episodes_word_pairs_query('{TEXT_CONFIG}', %s) AS query)"


def turn_counts(tenant: Tenant, layers_version: int | None = None) -> tuple[int, int]:
    """How many turns the tenant has, and how many of them are packed; cached per process for
    ``PACKED_COUNT_TTL`` seconds, and counted again as soon as ``layers_version`` (the tenant's,
    which every move between layers changes: ``holding``) is not the one counted at. None takes
    whatever is cached. They choose a plan and weigh the tiers' text lists (``retrieval.ranking``)."""
    tenant_id = str(tenant.pk)

    def compute() -> tuple[int | None, tuple[int, int]]:
        with db.cursor(tenant_id) as cursor:
            cursor.execute(
                f"SELECT count(*), count(*) FILTER (WHERE packed) FROM {TURNS} WHERE tenant_id = %s",
                [tenant_id],
            )
            total, packed = cursor.fetchone()
            return layers_version, (int(total), int(packed))

    cached = _packed_count_cache.get(tenant_id)
    if cached is not None and layers_version is not None and cached[1][0] != layers_version:
        del _packed_count_cache[tenant_id]
    return cast(tuple[int, int], ttl_cached(_packed_count_cache, tenant_id, PACKED_COUNT_TTL, compute)[1])


def packed_turns(tenant: Tenant) -> int:
    """How many packed turns the tenant has (see ``turn_counts``)."""
    return turn_counts(tenant)[1]


def layers_version_if_any(tenant: Tenant, layers: tuple[str, ...]) -> int | None:
    """The tenant's ``layers_version`` when it has any episode in these layers (any state), else
    None.

    Not ``EXISTS (...)``: a tenant the planner's statistics do not know yet (just loaded, or
    autovacuum has not analysed since) is estimated to hold thousands of such rows, so it
    scans the table for the first one. Ordering by the `(tenant, layer)` index's own columns
    makes the index the only cheap plan, an index-only scan (docs/decisions/0005)."""
    sql, params = layers_version_expression(tenant, layers)
    row = db.fetch_one(f"SELECT {sql}", params, tenant=tenant)
    return None if row is None or row[0] is None else int(row[0])


def layers_version_expression(tenant: Tenant, layers: tuple[str, ...]) -> tuple[str, list[Any]]:
    """``layers_version_if_any`` as a SQL expression (NULL for None) with its parameters, to be read
    beside other values in one statement (``lifecycle.policy_rows.read_policy_beside``)."""
    tenant_id = tenant.pk
    return (
        f"(SELECT (SELECT layers_version FROM {TENANTS} WHERE id = %s) FROM {EPISODES} v "
        "WHERE v.tenant_id = %s AND v.layer = ANY(%s) ORDER BY v.tenant_id, v.layer LIMIT 1)",
        [tenant_id, tenant_id, list(layers)],
    )


@dataclass(frozen=True)
class ArchiveHit:
    """One match in the warm/cold tier: a packed turn (``turn_id``) or an episode's own shape or
    centroid (``turn_id`` None), with its similarity or text rank."""

    episode_id: int
    turn_id: int | None
    score: float
    #: The tier that found it (``retrieval.ranking.Match``).
    source: ClassVar[str] = "postgres"
    #: What it is compared by (``vector_candidates``).
    vector: np.ndarray | None = field(default=None, repr=False, compare=False)


def exact_plan(tenant: Tenant) -> bool:
    """Whether the tenant's warm and cold search takes the exact plan (see ``_plan``)."""
    return packed_turns(tenant) <= EXACT_PACKED_TURNS


def text_cap(exact: bool) -> int:
    """How many matches each full-text pass ranks, on the exact plan or the approximate one."""
    return TEXT_CANDIDATES_EXACT if exact else TEXT_CANDIDATES


def _plan(tenant: Tenant, scope: Scope, raw_turns: bool) -> tuple[bool, bool, str, list[Any]]:
    """(exact, shapes, WHERE on ``e``, its parameters). Two plans, by the tenant's size. Up to
    EXACT_PACKED_TURNS packed turns, everything is exact and complete: packed turns and episode
    centroids ranked by true distance, full text over every lexeme. Above, the approximate
    indexes: the partial HNSW graphs (with `hnsw.iterative_scan`, set for every connection), and
    full text over rows holding any two of the query's lexemes rather than any one (see
    ``text_search``). An HNSW graph is shared by all tenants, so a small tenant's rows are a
    sliver of it that a filtered scan may never reach: small tenants are never searched through
    it. Episode centroids and shapes (the seeds' "small index" of packed episodes, and hot
    episodes when Redis is down) are searched on the exact plan, without raw turns, or for hot
    episodes; on the approximate plan the raw turns cover what they say."""
    layers = scope.layers or ALL_LAYERS
    where, params = scope.sql("e")
    exact = exact_plan(tenant)
    shapes = not raw_turns or exact or Layer.HOT in layers
    return exact, shapes, f"e.tenant_id = %s AND {where}", [tenant.pk, *params]


def vector_candidates(
    tenant: Tenant, *, vector: np.ndarray, scope: Scope, k: int, raw_turns: bool = True
) -> list[ArchiveHit]:
    """The packed turns (and, where searched, episode centroids) nearest ``vector``: ``RESCORED``
    times ``k`` of them, each with the vector it is compared by, so that ``rescored`` can rank them
    for another query vector without another statement (search moves its query vector once the
    full-text matches are in, while this statement is already under way).

    A packed turn is compared as a hot turn document is: its own embedding plus the embedding of
    its window (``episodes.indexing.turn_documents``), so a turn scores the same in either tier and
    the two tiers' lists merge by score. The exact plan orders by that; the approximate one walks
    the HNSW graph of own embeddings."""
    exact, shapes, where, params = _plan(tenant, scope, raw_turns)
    tenant_id = tenant.pk
    literal = db.Vector(vector)
    parts: list[str] = []
    args: list[Any] = []
    if raw_turns:
        # The turns of packed episodes keep their own embeddings (the raw log is never packed).
        blended = "coalesce({t}.embedding + {t}.context_embedding, {t}.embedding)"
        packed = (
            f"FROM {TURNS} t JOIN {EPISODES} e ON e.id = t.episode_id "
            f"WHERE t.packed AND t.embedding IS NOT NULL AND t.tenant_id = %s AND {where}"
        )
        if exact:
            parts.append(
                f"(SELECT t.episode_id, t.id, {blended.format(t='t')} {packed} "
                f"ORDER BY ({blended.format(t='t')} <=> %s::vector) LIMIT %s)"
            )
            args.extend([tenant_id, *params, literal, RESCORED * k])
        else:
            # The nearest by their own embedding first, and only theirs blended: when Postgres
            # sorts the tenant's rows rather than walking the graph, reading every row's second
            # vector (stored out of line, TOAST) is a large share of the statement's cost, so only
            # the nearest few read it (docs/decisions/0034).
            parts.append(
                f"(SELECT n.episode_id, n.id, {blended.format(t='n')} FROM (SELECT t.episode_id, t.id, "
                f"t.embedding, t.context_embedding, t.embedding <=> %s::vector AS distance {packed} "
                f"ORDER BY distance LIMIT %s) n)"
            )
            args.extend([literal, tenant_id, *params, RESCORED * k])
    if shapes:
        # "+ 0" keeps the planner off the HNSW index where the ranking must be exact.
        distance = "+ 0" if exact else ""
        parts.append(
            f"(SELECT e.id, NULL::bigint, e.embedding FROM {EPISODES} e "
            f"WHERE {where} AND e.embedding IS NOT NULL ORDER BY (e.embedding <=> %s::vector) {distance} "
            f"LIMIT %s)"
        )
        args.extend([*params, literal, k])
    rows = db.fetch(" UNION ALL ".join(parts), args, tenant=tenant) if parts else []
    if not rows:
        return []
    vectors = db.vector_rows([v for _, _, v in rows])  # decoded at once
    return [
        ArchiveHit(int(e), int(t) if t is not None else None, 0.0, vectors[i])
        for i, (e, t, _) in enumerate(rows)
    ]


Scored = TypeVar("Scored", bound=Any)


def rescored(candidates: list[Scored], vector: np.ndarray, k: int) -> list[Scored]:
    """The ``k`` candidates (each with its ``vector``: an ``ArchiveHit`` or a hot hit) most similar
    to ``vector``, best first, scored by cosine similarity."""
    candidates = [c for c in candidates if c.vector is not None]
    if not candidates:
        return []
    stacked = np.stack([c.vector for c in candidates])
    query = np.asarray(vector, dtype=np.float32)
    sims = stacked @ query / (np.linalg.norm(stacked, axis=1) * np.linalg.norm(query) + 1e-12)
    order = np.argsort(-sims)[:k].tolist()
    scores = sims.tolist()
    return [_with_score(candidates[i], scores[i]) for i in order]


def _with_score(hit: Scored, score: float) -> Scored:
    """A copy of a hit (a dataclass, frozen or not) with another score. Not ``dataclasses.replace``,
    which runs ``__init__`` again: a search copies 100 hits or more, and it was most of ``rescored``."""
    copy = object.__new__(type(hit))
    copy.__dict__.update(hit.__dict__, score=score)
    return copy


def text_search(
    tenant: Tenant, *, text: str, scope: Scope, k: int, raw_turns: bool = True
) -> list[ArchiveHit]:
    """Full-text matches, best first: packed turns matching all the query's lexemes, then those
    of the broad pass, then episodes by their own text (summary, key points, headline). A packed
    turn is matched by its window, the turn with its neighbours, as its hot document was
    (`window_vector`, migration 0014).

    Full text runs in two passes: every match of all the query's lexemes, ranked; then, because a
    question rarely shares every word with its answer, a broad pass. Each ranks at most `cap`
    matches, taken as the index finds them (unranked). A small tenant's broad pass is any word:
    its matches are few and all ranked. In a large tenant one common word matches thousands of
    rows, of which the cap would keep an arbitrary few, so its broad pass is any two words: rows
    sharing two of the question's words are fewer and likelier its answer. The broad pass ranks
    with `ts_rank`, not `ts_rank_cd`, whose cover search over an OR of every pair of words is slow
    (docs/decisions/0005). (The all-words passes are capped too: a question left with one common
    word after its stopwords matches a large share of a big tenant.)"""
    if not text.strip():
        return []
    text = query_text(text)
    exact, shapes, where, params = _plan(tenant, scope, raw_turns)
    tenant_id = tenant.pk
    broad = _ANY_WORD_QUERY if exact else _TWO_WORDS_QUERY
    cap = text_cap(exact)
    parts: list[str] = []
    args: list[Any] = []
    if raw_turns:
        for order, (query, rank) in enumerate(((_ALL_WORDS_QUERY, "ts_rank_cd"), (broad, "ts_rank"))):
            parts.append(
                f"(SELECT {order} AS pass, s.episode_id, s.id, s.rank FROM (SELECT t.episode_id, t.id, "
                f"{rank}(t.window_vector, q.query) AS rank FROM {query} q, {TURNS} t "
                f"JOIN {EPISODES} e ON e.id = t.episode_id WHERE q.query IS NOT NULL AND t.packed "
                f"AND t.tenant_id = %s AND t.window_vector @@ q.query AND {where} LIMIT %s) s "
                f"ORDER BY s.rank DESC, s.id LIMIT %s)"
            )
            args.extend([text, tenant_id, *params, cap, k])
    # The episodes' own text: all words; the broad pass only where their shapes are searched.
    episode_passes = [(_ALL_WORDS_QUERY, "ts_rank_cd")] + ([(broad, "ts_rank")] if shapes else [])
    for order, (query, rank) in enumerate(episode_passes, start=2):
        parts.append(
            f"(SELECT {order} AS pass, c.id, NULL::bigint, {rank}(c.search_vector, q.query) AS rank "
            f"FROM {query} q, LATERAL (SELECT e.id, e.search_vector FROM {EPISODES} e WHERE q.query IS NOT NULL "
            f"AND e.search_vector @@ q.query AND {where} LIMIT %s) c ORDER BY rank DESC, c.id LIMIT %s)"
        )
        args.extend([text, *params, cap, k])
    rows = db.fetch(" UNION ALL ".join(parts), args, tenant=tenant)
    # All-words turn matches first (a turn is where a question's words are), then the broad pass,
    # then the shapes'; each thing once, at its first place. Equal ranks go by id (each statement
    # orders by it too): the same memory, exported and imported, ranks the same, whatever order
    # the rows have on disk.
    rows.sort(key=lambda r: (r[0], -float(r[3])))
    hits: list[ArchiveHit] = []
    seen: set[tuple[int, int | None]] = set()
    for _, episode_id, turn_id, rank in rows:
        key = (int(episode_id), int(turn_id) if turn_id is not None else None)
        if key not in seen:
            seen.add(key)
            hits.append(ArchiveHit(key[0], key[1], float(rank)))
    return hits


def vectors_of(tenant: Tenant, hits: Sequence[ArchiveHit]) -> dict[tuple[int, int | None], np.ndarray]:
    """The vectors these packed turns and episodes (as ``text_search`` and ``vector_candidates``
    return them: an episode by its centroid where ``turn_id`` is None) are searched by, by
    (episode id, turn id): what a query is moved towards (pseudo-relevance feedback). A hit
    without a vector is left out."""
    turn_ids = [h.turn_id for h in hits if h.turn_id is not None]
    episode_ids = [h.episode_id for h in hits if h.turn_id is None]
    if not turn_ids and not episode_ids:
        return {}
    tenant_id = tenant.pk
    rows = db.fetch(
        f"SELECT t.episode_id, t.id, coalesce(t.embedding + t.context_embedding, t.embedding) FROM {TURNS} t "
        f"WHERE t.tenant_id = %s AND t.id = ANY(%s) AND t.embedding IS NOT NULL "
        f"UNION ALL SELECT e.id, NULL::bigint, e.embedding FROM {EPISODES} e WHERE e.tenant_id = %s "
        f"AND e.id = ANY(%s) AND e.embedding IS NOT NULL",
        [tenant_id, turn_ids, tenant_id, episode_ids],
        tenant=tenant,
    )
    return {(int(e), int(t) if t is not None else None): db.vector_of(v) for e, t, v in rows}
