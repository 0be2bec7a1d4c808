"""Warm and cold search in Postgres: pgvector HNSW (iterative scan) and full text, tenant-scoped.

Also serves every layer when Redis is down (degraded mode). The tenant filter is part of every
statement built here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
from django.db import connection

OR_CANDIDATES = 2000
# The query's lexemes OR-ed: a question rarely shares every word with its answer.
_ANY_WORD_QUERY = (
    "(SELECT NULLIF(replace(plainto_tsquery('english', %s)::text, '&', '|'), '')::tsquery AS query)"
)
PACKED_TURNS = 5000


@dataclass(frozen=True)
class ArchiveFilters:
    layers: tuple[str, ...]
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    kinds: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    occurred_from: datetime | None = None
    occurred_to: datetime | None = None
    include_dormant: bool = False
    #: also rank packed episodes by their raw turns (vectors and full text), each by its best turn
    raw_turns: bool = True


def _where(tenant_id: str, f: ArchiveFilters) -> tuple[str, list]:
    states = ["active", "dormant"] if f.include_dormant else ["active"]
    clauses = ["e.tenant_id = %s", "e.layer = ANY(%s)", "e.state = ANY(%s)"]
    params: list = [tenant_id, list(f.layers), states]
    for name in ("user_id", "agent_id", "session_id"):
        value = getattr(f, name)
        if value is not None:
            clauses.append(f"e.{name} = %s")
            params.append(value)
    if f.kinds:
        clauses.append("e.kind = ANY(%s)")
        params.append(list(f.kinds))
    if f.tags:
        clauses.append("(e.tags && %s::varchar[] OR e.keywords && %s::varchar[])")
        params.extend([list(f.tags), list(f.tags)])
    if f.occurred_from is not None:
        clauses.append("e.last_occurred_at >= %s")
        params.append(f.occurred_from)
    if f.occurred_to is not None:
        clauses.append("e.first_occurred_at <= %s")
        params.append(f.occurred_to)
    return " AND ".join(clauses), params


def search(
    tenant_id: str, *, vector: np.ndarray | None, text: str | None, filters: ArchiveFilters, k: int
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(vector hits, text hits) as (episode id, similarity or rank) lists, best first.

    Both run in one statement (one round trip). The HNSW scan relies on `hnsw.iterative_scan`
    (set for every connection in settings) to keep filling the top k when the tenant and layer
    filters discard candidates (pgvector >= 0.8).
    """
    if not filters.layers or (vector is None and not (text and text.strip())):
        return [], []
    where, params = _where(tenant_id, filters)
    parts: list[str] = []
    args: list = []
    if vector is not None:
        literal = _vec(vector)
        parts.append(
            f"(SELECT 'v' AS src, e.id, 1 - (e.embedding <=> %s::vector) AS score FROM episodes_episode e "
            f"WHERE {where} AND e.embedding IS NOT NULL ORDER BY e.embedding <=> %s::vector LIMIT %s)"
        )
        args.extend([literal, *params, literal, k])
        # The turns of packed episodes keep their own embeddings (the raw log is never packed).
        # An episode's centroid blurs the one turn a question is about, so the most recent
        # PACKED_TURNS turns are also ranked exactly, each episode by its best turn; older ones
        # are reached through the centroid index above.
        if filters.raw_turns:
            parts.append(
                f"(SELECT 'p' AS src, s.episode_id AS id, max(s.sim) AS score FROM (SELECT t.episode_id, "
                f"1 - (t.embedding <=> %s::vector) AS sim FROM episodes_turn t JOIN episodes_episode e "
                f"ON e.id = t.episode_id WHERE t.tenant_id = %s AND {where} AND t.embedding IS NOT NULL "
                f"ORDER BY t.id DESC LIMIT %s) s GROUP BY s.episode_id ORDER BY score DESC LIMIT %s)"
            )
            args.extend([literal, tenant_id, *params, PACKED_TURNS, k])
    if text and text.strip():
        # Full text ranks a bounded candidate set (ts_rank_cd over tens of thousands of matches
        # costs hundreds of ms, DESIGN §9): every episode holding all the query's lexemes,
        # ranked; then, because a question rarely shares every word with its answer, the first
        # OR_CANDIDATES episodes holding any of them, ranked. AND hits come first.
        parts.append(
            f"(SELECT 'a' AS src, e.id, ts_rank_cd(e.search_vector, q.query) AS score FROM episodes_episode e, "
            f"(SELECT plainto_tsquery('english', %s) AS query) q "
            f"WHERE e.search_vector @@ q.query AND {where} ORDER BY score DESC LIMIT %s)"
        )
        args.extend([text, *params, k])
        parts.append(
            f"(SELECT 'o' AS src, c.id, ts_rank_cd(c.search_vector, q.query) AS score FROM "
            f"{_ANY_WORD_QUERY} q, "
            f"LATERAL (SELECT e.id, e.search_vector FROM episodes_episode e WHERE q.query IS NOT NULL "
            f"AND e.search_vector @@ q.query AND {where} LIMIT %s) c ORDER BY score DESC LIMIT %s)"
        )
        args.extend([text, *params, OR_CANDIDATES, k])
        if filters.raw_turns:
            parts.append(
                f"(SELECT 'r' AS src, s.episode_id AS id, max(s.rank) AS score FROM (SELECT t.episode_id, "
                f"ts_rank_cd(t.search_vector, q.query) AS rank FROM "
                f"{_ANY_WORD_QUERY} q, "
                f"episodes_turn t JOIN episodes_episode e ON e.id = t.episode_id WHERE q.query IS NOT NULL "
                f"AND t.tenant_id = %s AND t.search_vector @@ q.query AND {where} LIMIT %s) s "
                f"GROUP BY s.episode_id ORDER BY score DESC LIMIT %s)"
            )
            args.extend([text, tenant_id, *params, OR_CANDIDATES, k])
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), args)
        rows = cursor.fetchall()
    best: dict[int, float] = {}
    for src, i, sc in rows:
        if src in ("v", "p"):
            best[int(i)] = max(best.get(int(i), -1.0), float(sc))
    vector_hits = sorted(best.items(), key=lambda x: -x[1])[:k]
    all_words = sorted(((int(i), float(sc)) for src, i, sc in rows if src == "a"), key=lambda x: -x[1])
    any_word = sorted(((int(i), float(sc)) for src, i, sc in rows if src == "o"), key=lambda x: -x[1])
    by_turn = sorted(((int(i), float(sc)) for src, i, sc in rows if src == "r"), key=lambda x: -x[1])
    text_hits = []
    seen: set[int] = set()
    # Raw-turn matches rank first when searched (a turn is where a question's words are);
    # then the shape's all-words and any-word matches.
    for i, sc in by_turn + all_words + any_word:
        if i not in seen:
            seen.add(i)
            text_hits.append((i, sc))
    text_hits = text_hits[:k]
    return vector_hits, text_hits


def turn_similarities(episode_ids: list[int], vector: np.ndarray) -> dict[int, list[tuple[int, float]]]:
    """Per episode, its turns by cosine similarity to ``vector`` (degraded mode's matched turns)."""
    if not episode_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT episode_id, id, 1 - (embedding <=> %s::vector) FROM episodes_turn "
            "WHERE episode_id = ANY(%s) AND embedding IS NOT NULL",
            [_vec(vector), episode_ids],
        )
        out: dict[int, list[tuple[int, float]]] = {}
        for episode_id, turn_id, sim in cursor.fetchall():
            out.setdefault(int(episode_id), []).append((int(turn_id), float(sim)))
    for values in out.values():
        values.sort(key=lambda x: -x[1])
    return out


def _vec(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{float(v):.7g}" for v in np.asarray(vector).ravel()) + "]"
