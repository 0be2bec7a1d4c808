"""Statements that find merge candidates: an episode's nearest neighbours of the same kind and
owner (``MERGE_SCOPE``), and the similarities of given pairs. Every one takes the tenant and has it
in its WHERE (``episodes.stores.rows`` has the read path's row reads)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from django.db import transaction

from episodes.models import Episode, State
from memory_platform import db
from memory_platform.tenancy.models import Tenant

from .tables import EPISODES

#: The owner fields a merge never crosses: two memories are merged only when they hold the same
#: values of these ("" included), so one person's memory never disappears into another's. The
#: session is not among them: a person repeats themselves across sessions
#: (docs/decisions/0040-merges-within-one-scope.md).
MERGE_SCOPE = ("user_id", "agent_id")


def _same_scope(other: str, one: str) -> str:
    """The SQL that keeps rows of ``other`` with the ``MERGE_SCOPE`` of ``one`` (table aliases)."""
    return " ".join(f"AND {other}.{name} = {one}.{name}" for name in MERGE_SCOPE)


def merge_scope(episode: Episode) -> tuple[str, ...]:
    """The values of ``MERGE_SCOPE`` of an episode: two episodes may merge only if they are equal."""
    return tuple(getattr(episode, name) for name in MERGE_SCOPE)


#: A tenant with at most this many embedded packed episodes has its merge neighbours ranked in
#: memory, from one read of their vectors, not by a nearest-neighbour search per episode: a tenant
#: of 1,000 took 0.51 s a tick in 1,000 searches (docs/decisions/0056-tick-at-scale.md).
MERGE_IN_MEMORY = 5_000


def merge_neighbours(
    tenant: Tenant, episode_ids: Sequence[int], *, neighbours: int, threshold: float, packed: int
) -> list[tuple[int, int, float]]:
    """(episode, neighbour, cosine) for up to ``neighbours`` nearest packed episodes of the same
    tenant, kind and ``MERGE_SCOPE`` of each, at or above ``threshold`` (``lifecycle.candidates``
    proposes merges from them). The owner is inside the nearest-neighbour search, so each
    episode's neighbours are its owner's (a filter afterwards would leave none where other
    people wrote the same words). ``packed``: how many packed episodes the tenant has, as the
    caller's listing counted them; up to ``MERGE_IN_MEMORY`` they are ranked in memory."""
    if not episode_ids:
        return []
    if packed <= MERGE_IN_MEMORY:
        found = _merge_neighbours_in_memory(tenant, episode_ids, neighbours=neighbours, threshold=threshold)
        if found is not None:
            return found
    with transaction.atomic(), db.cursor(tenant) as cursor:
        # Packed episodes only. An owner's few are read through episode_packed_owner (tenant,
        # owner, kind; lifecycle migration 0011) and ranked exactly; a large owner's through the
        # HNSW index of warm and cold rows, which iterative scan keeps useful under the filters
        # (pgvector 0.8). The planner chooses by the number of owners it sees.
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute(
            f"SELECT a.id, b.id, 1 - (a.embedding <=> b.embedding) AS sim FROM {EPISODES} a "
            f"CROSS JOIN LATERAL (SELECT c.id, c.embedding FROM {EPISODES} c "
            f"  WHERE c.tenant_id = a.tenant_id AND c.kind = a.kind {_same_scope('c', 'a')} "
            "  AND c.id <> a.id AND c.layer IN ('warm', 'cold') AND c.state <> %s "
            "  AND c.embedding IS NOT NULL "
            "  ORDER BY c.embedding <=> a.embedding LIMIT %s) b "
            # An episode without a vector has no neighbours: it is not searched from at all (the
            # search from a missing vector orders nothing and would read the owner's every row).
            "WHERE a.tenant_id = %s AND a.id = ANY(%s) AND a.embedding IS NOT NULL "
            "AND 1 - (a.embedding <=> b.embedding) >= %s",
            [State.FORGOTTEN, neighbours, tenant.pk, list(episode_ids), threshold],
        )
        return [(int(a), int(b), float(sim)) for a, b, sim in cursor.fetchall()]


def _merge_neighbours_in_memory(
    tenant: Tenant, episode_ids: Sequence[int], *, neighbours: int, threshold: float
) -> list[tuple[int, int, float]] | None:
    """``merge_neighbours`` ranked exactly in memory, as the search ranks a small owner's episodes
    (the same candidates, cosine to float precision, ties by id); None when the tenant has come
    to hold more than ``MERGE_IN_MEMORY`` embedded packed episodes since they were counted, left
    to the index."""
    scope = ", ".join(MERGE_SCOPE)
    found = db.fetch(
        f"SELECT id, layer IN ('warm', 'cold') AND state <> %s, kind, {scope}, embedding "
        f"FROM {EPISODES} WHERE tenant_id = %s AND embedding IS NOT NULL "
        "AND ((layer IN ('warm', 'cold') AND state <> %s) OR id = ANY(%s)) LIMIT %s",
        [
            State.FORGOTTEN,
            tenant.pk,
            State.FORGOTTEN,
            list(episode_ids),
            MERGE_IN_MEMORY + len(episode_ids) + 1,
        ],
        tenant=tenant,
    )
    if sum(1 for row in found if row[1]) > MERGE_IN_MEMORY or len(found) > MERGE_IN_MEMORY + len(episode_ids):
        return None
    wanted = set(episode_ids)
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in found:
        groups.setdefault(tuple(row[2:-1]), []).append(row)
    result: list[tuple[int, int, float]] = []
    for rows_ in groups.values():
        sources = [k for k, row in enumerate(rows_) if row[0] in wanted]
        targets = [k for k, row in enumerate(rows_) if row[1]]
        if not sources or not targets:
            continue
        # In float32, as pgvector sums its cosines (and at half float64's cost: the matrix is most
        # of a merge scan's time in Python).
        vectors = db.vector_rows([row[-1] for row in rows_])
        with np.errstate(divide="ignore", invalid="ignore"):
            vectors /= np.linalg.norm(vectors, axis=1)[:, None]
        ids = np.array([row[0] for row in rows_])
        sims = vectors[sources] @ vectors[targets].T
        source_ids, target_ids = ids[sources], ids[targets]
        # Never the episode itself: where a source is also a target (each row is one episode).
        column = np.full(len(rows_), -1)
        column[targets] = np.arange(len(targets))
        own = column[sources]
        sims[np.flatnonzero(own >= 0), own[own >= 0]] = -np.inf
        # Only pairs at the threshold can be answered, so the nearest ``neighbours`` of each source
        # are taken among those: best first, a tie by the lower id.
        src, col = np.nonzero(sims >= threshold)
        sim, other = sims[src, col], target_ids[col]
        order = np.lexsort((other, -sim, src))
        src, other, sim = src[order], other[order], sim[order]
        starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]]) if len(src) else np.array([], int)
        rank = np.arange(len(src)) - np.repeat(starts, np.diff(np.r_[starts, len(src)]))
        keep = rank < neighbours
        result += zip(source_ids[src[keep]].tolist(), other[keep].tolist(), sim[keep].tolist(), strict=True)
    return result


def merge_similarities(tenant: Tenant, pairs: Sequence[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """The cosine of each (episode, survivor) pair of the tenant whose two episodes are of the same
    kind and ``MERGE_SCOPE`` and both embedded; a pair that crosses is absent from the answer."""
    if not pairs:
        return {}
    found = db.fetch(
        "SELECT a.id, b.id, 1 - (a.embedding <=> b.embedding) "
        "FROM unnest(%s::bigint[], %s::bigint[]) AS p(a, b) "
        f"JOIN {EPISODES} a ON a.id = p.a AND a.tenant_id = %s "
        f"JOIN {EPISODES} b ON b.id = p.b AND b.tenant_id = a.tenant_id AND b.kind = a.kind "
        f"{_same_scope('b', 'a')} "
        "WHERE a.embedding IS NOT NULL AND b.embedding IS NOT NULL",
        [[a for a, _ in pairs], [b for _, b in pairs], tenant.pk],
        tenant=tenant,
    )
    return {(int(a), int(b)): float(sim) for a, b, sim in found}
