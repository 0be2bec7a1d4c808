"""Statements on episode and turn rows by id: the read path's row reads, usage counts, one hop
(merge candidates' statements: ``episodes.stores.merges``). Every one takes the tenant and has it in its WHERE, so an id of another tenant's row
reads nothing and writes nothing.

They run through ``memory_platform.db.fetch`` (server-side parameters, binary rows): on the read
path Django's client-side binding cost more than the statements (docs/decisions/0004).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
from django.db import connection, transaction

from episodes.language import TEXT_CONFIG, index_text
from episodes.models import Episode, LinkKind, State
from memory_platform import db
from memory_platform.tenancy.models import Tenant

from .tables import EPISODES, LINKS, TURNS


class RankRow(NamedTuple):
    """What ranking reads of a candidate (the inputs of the priority, and its times)."""

    pk: int
    layer: str
    state: str
    anchor: bool
    access_count: int
    last_accessed_at: datetime
    created_at: datetime
    first_occurred_at: datetime
    last_occurred_at: datetime
    #: The episodes that supersede it (``LinkKind.SUPERSEDES``): newer ones of its owner that
    #: state a new value of what it says.
    superseded_by: Sequence[int] = ()
    #: The days its turns mention (``Episode.mentioned``), read only when the query names a time.
    mentioned: Sequence[str] = ()
    #: The episode's columns as a hit shows it (``hit_episode``), read in the same statement:
    #: the candidates that make the top become hits without another one.
    hit: tuple[Any, ...] = ()


class TurnRow(NamedTuple):
    """The fields of a turn a response shows (no vectors, no search text)."""

    pk: int
    episode_id: int
    seq: int
    public_id: str
    role: str = ""
    text: str = ""
    occurred_at: datetime | None = None
    metadata: dict[str, Any] | None = None
    language: str = ""
    #: The length of its text, read whether or not the text is.
    chars: int = 0


@functools.cache
def _hit_columns(alias: str = "") -> tuple[str, list[str]]:
    """An episode's columns as a hit shows it (vectors, search text and metadata stay behind),
    and their field names."""
    left_out = {"embedding", "search_text", "search_vector", "metadata"}
    fields = [f for f in Episode._meta.concrete_fields if f.attname not in left_out]
    return db.column_list(fields, alias), [f.attname for f in fields]


def hit_episode(row: RankRow) -> Episode:
    """A ranked candidate as the episode a hit shows (no vectors, search text or metadata), from
    the columns ``rank_rows`` read with it."""
    return Episode.from_db(connection.alias, _hit_columns()[1], row.hit)


#: The episodes that supersede ``e``, through the index link_tenant_dst (a few rows, mostly none).
_SUPERSEDERS = f"ARRAY(SELECT l.src_id FROM {LINKS} l WHERE l.tenant_id = e.tenant_id AND l.dst_id = e.id AND l.kind = %s)"


def rank_rows(tenant: Tenant, episode_ids: Sequence[int], mentioned: bool = False) -> list[RankRow]:
    """What ranking reads of each of the tenant's visible candidates, in one statement, with the
    columns a hit shows (``RankRow.hit``); the days their turns mention with ``mentioned`` (a query
    that names a time)."""
    if not episode_ids:
        return []
    columns, _ = _hit_columns("e")
    read = 11 if mentioned else 10
    rows = db.fetch(
        "SELECT e.id, e.layer, e.state, e.anchor, e.access_count, e.last_accessed_at, e.created_at, "
        f"e.first_occurred_at, e.last_occurred_at, {_SUPERSEDERS}{', e.mentioned' if mentioned else ''}, "
        f"{columns} FROM {EPISODES} e "
        "WHERE e.tenant_id = %s AND e.id = ANY(%s) AND e.state <> %s",
        [LinkKind.SUPERSEDES.value, tenant.pk, list(episode_ids), State.FORGOTTEN.value],
        tenant=tenant,
    )
    return [RankRow._make([*row[:10], row[10] if mentioned else (), row[read:]]) for row in rows]


def turns_for(
    tenant: Tenant, episode_ids: Sequence[int], *, full: set[int], texts: Sequence[int] = ()
) -> dict[int, list[TurnRow]]:
    """The tenant's turns of these episodes, in order, in one statement: every shown field for
    ``full`` episodes and for the turns in ``texts``, ids only for the others (their text stays in
    the database)."""
    return turns_with_similarity(tenant, episode_ids, full=full, texts=texts)[0]


def turns_with_similarity(
    tenant: Tenant,
    episode_ids: Sequence[int],
    *,
    full: set[int],
    texts: Sequence[int] = (),
    vector: np.ndarray | None = None,
    around: Sequence[int] = (),
    leading: Sequence[int] = (),
    reach: int = 0,
) -> tuple[dict[int, list[TurnRow]], dict[int, float] | None]:
    """``turns_for``, and in the same statement each embedded turn's cosine similarity to
    ``vector`` by turn id (None without a vector).

    The text is also read for the turns within ``reach`` places of a turn in ``around`` in its
    episode, and for the first ``1 + 2 * reach`` turns of the ``leading`` episodes: the turns an
    answer may show of a packed episode (``retrieval.evidence.candidate_reads``), read here rather
    than in a statement of their own."""
    out: dict[int, list[TurnRow]] = {e: [] for e in episode_ids}
    if not episode_ids:
        return out, None if vector is None else {}
    similarity = "NULL::float8" if vector is None else "1 - (embedding <=> %s::vector)"
    span = int(reach)
    # Each turn's place in its episode, and whether one of ``around`` is within ``reach`` of it:
    # window functions, computed only when asked for (they cost a sort of the rows).
    windowed = bool(around or leading)
    near = (
        f"bool_or(id = ANY(%s)) OVER (PARTITION BY episode_id ORDER BY seq, id "
        f"ROWS BETWEEN {span} PRECEDING AND {span} FOLLOWING)"
        if windowed
        else "false"
    )
    place = "row_number() OVER (PARTITION BY episode_id ORDER BY seq, id)" if windowed else "0"
    rows = db.fetch(
        "SELECT id, episode_id, seq, public_id, s.shown, role, CASE WHEN s.shown THEN text END, occurred_at, "
        f"CASE WHEN s.shown THEN metadata END, language, length(text), {similarity} FROM "
        "(SELECT id, episode_id, seq, public_id, role, text, occurred_at, metadata, language, embedding, "
        f"{near} AS near, {place} AS place FROM {TURNS} WHERE tenant_id = %s AND episode_id = ANY(%s)) t, "
        "LATERAL (SELECT episode_id = ANY(%s) OR id = ANY(%s) OR near "
        "OR (episode_id = ANY(%s) AND place <= %s) AS shown) s ORDER BY episode_id, seq, id",
        [
            *([] if vector is None else [db.Vector(vector)]),
            *([list(around)] if windowed else []),
            tenant.pk,
            list(episode_ids),
            list(full),
            list(texts),
            list(leading),
            1 + 2 * span,
        ],
        tenant=tenant,
    )
    sims: dict[int, float] | None = None if vector is None else {}
    for *fields, sim in rows:
        pk, episode_id, seq, public_id, shown, role, text, occurred_at, metadata, language, chars = fields
        turn = (
            TurnRow(pk, episode_id, seq, public_id, role, text, occurred_at, metadata or {}, language, chars)
            if shown
            else TurnRow(pk, episode_id, seq, public_id, chars=chars)
        )
        out[episode_id].append(turn)
        if sims is not None and sim is not None:
            sims[int(pk)] = float(sim)
    return out, sims


def turn_texts(tenant: Tenant, turn_ids: Sequence[int]) -> dict[int, TurnRow]:
    """These turns of the tenant with every shown field (the turns an answer chose of a packed
    episode, whose text ``turns_for`` left in the database)."""
    if not turn_ids:
        return {}
    rows = db.fetch(
        "SELECT id, episode_id, seq, public_id, role, text, occurred_at, metadata, language, length(text) "
        f"FROM {TURNS} WHERE tenant_id = %s AND id = ANY(%s)",
        [tenant.pk, list(turn_ids)],
        tenant=tenant,
    )
    return {
        int(pk): TurnRow(
            pk, episode_id, seq, public_id, role, text, occurred_at, metadata or {}, language, chars
        )
        for pk, episode_id, seq, public_id, role, text, occurred_at, metadata, language, chars in rows
    }


def turn_similarities(
    tenant: Tenant, episode_ids: Sequence[int], vector: np.ndarray
) -> dict[int, list[tuple[int, float]]]:
    """Per episode, its turns by cosine similarity to ``vector`` (degraded mode's matched turns)."""
    if not episode_ids:
        return {}
    rows = db.fetch(
        f"SELECT episode_id, id, 1 - (embedding <=> %s::vector) FROM {TURNS} "
        "WHERE tenant_id = %s AND episode_id = ANY(%s) AND embedding IS NOT NULL",
        [db.Vector(vector), tenant.pk, list(episode_ids)],
        tenant=tenant,
    )
    out: dict[int, list[tuple[int, float]]] = {}
    for episode_id, turn_id, sim in rows:
        out.setdefault(int(episode_id), []).append((int(turn_id), float(sim)))
    for values in out.values():
        values.sort(key=lambda x: -x[1])
    return out


def hot_index_stale(tenant: Tenant, limit: int = 200) -> list[int]:
    """The tenant's hot episodes that wait to be (re-)indexed in Redis (at most ``limit``): a write
    that missed it (Redis down or full), or one a moment old (partial index `episode_needs_reindex`)."""
    sql, params = hot_index_stale_expression(tenant, limit)
    row = db.fetch_one(f"SELECT {sql}", params, tenant=tenant)
    return [int(pk) for pk in (row[0] if row else [])]


def hot_index_stale_expression(tenant: Tenant, limit: int = 200) -> tuple[str, list[Any]]:
    """``hot_index_stale`` as a SQL expression (an array of ids) with its parameters, to be read
    beside other values in one statement (``lifecycle.policy_rows.read_policy_beside``)."""
    return (
        f"ARRAY(SELECT s.id FROM {EPISODES} s WHERE s.tenant_id = %s AND s.needs_reindex "
        "AND s.layer = 'hot' AND s.state <> %s ORDER BY s.id DESC LIMIT %s)",
        [tenant.pk, State.FORGOTTEN.value, limit],
    )


class Use(NamedTuple):
    """Uses of one episode to add: accesses, link traversals, and the ``now`` of the latest."""

    accesses: int
    traversals: int
    at: datetime


#: The rows are locked first, by id (the UPDATE's own plan may walk them in any order: a hash join
#: in the table's physical order, a nested loop in the array's), so two processes writing the same
#: rows take their locks in one order and never wait for each other in a circle.
_ADD_USES = f"""
WITH locked AS MATERIALIZED (
    SELECT o.tenant_id, o.id FROM {EPISODES} o
    WHERE o.tenant_id = %s AND o.id = ANY(%s::bigint[]) ORDER BY o.id FOR NO KEY UPDATE
)
UPDATE {EPISODES} e SET
    access_count = e.access_count + u.accesses,
    traverse_count = e.traverse_count + u.traversals,
    last_accessed_at = u.at,
    version = e.version + u.accesses + u.traversals
FROM locked, unnest(%s::bigint[], %s::int[], %s::int[], %s::timestamptz[]) AS u(id, accesses, traversals, at)
WHERE e.tenant_id = %s AND e.tenant_id = locked.tenant_id AND e.id = locked.id AND u.id = locked.id
"""


def uses_add(uses: Mapping[tuple[uuid.UUID, int], Use]) -> int:
    """Add uses to episodes, keyed by (tenant id, episode id), without read-modify-write: one
    UPDATE per tenant that names it, so an episode id is matched within its tenant only, and on
    Postgres distributed by tenant the statement goes to that tenant's shard alone
    (docs/operations/scale-out.md). The version moves with every use, so a layer move in flight
    sees the touch and abandons (docs/concepts.md#halt-on-touch).

    In its own transaction it commits without waiting for the WAL flush: a count lost to a crash
    in the next milliseconds is harmless, and a search would otherwise wait for a disk sync."""
    if not uses:
        return 0
    by_tenant: dict[uuid.UUID, list[int]] = {}
    for tenant, episode in uses:
        by_tenant.setdefault(tenant, []).append(episode)
    own_transaction = not connection.in_atomic_block
    updated = 0
    with transaction.atomic():
        if own_transaction:  # never loosen a caller's transaction (ingest commits durably)
            with db.cursor(None) as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        # Tenants in one order, and each tenant's episodes locked by id (``_ADD_USES``).
        for tenant in sorted(by_tenant, key=str):
            episodes = sorted(by_tenant[tenant])
            with db.cursor(tenant) as cursor:
                cursor.execute(
                    _ADD_USES,
                    [
                        tenant,
                        episodes,
                        episodes,
                        [uses[tenant, e].accesses for e in episodes],
                        [uses[tenant, e].traversals for e in episodes],
                        [uses[tenant, e].at for e in episodes],
                        tenant,
                    ],
                )
                updated += int(cursor.rowcount)
    return updated


class Neighbour(NamedTuple):
    """An episode one hop from a seed: through an entity both name, or a link from the seed."""

    seed: int
    episode_id: int
    via: str  # "entity" or "link"
    name: str  # the entity, or the link's kind


def one_hop(
    tenant: Tenant, seeds: Sequence[int], where: str, params: list[Any], rare: int
) -> list[Neighbour]:
    """The tenant's episodes one hop from ``seeds``, within the search's scope (``where`` on ``e``,
    from ``Scope.sql``): those the seeds link to (a merged copy is not followed), and those sharing
    one of a seed's first 20 entities when at most ``rare`` other episodes name it (an entity in
    many episodes, a speaker's name, relates nothing). Each entity is looked up with a limit of
    ``rare + 1`` rows through the GIN index on entities, so a common one costs that many rows."""
    if not seeds:
        return []
    by_entity = (
        f"SELECT s.id, n.id, 'entity', x.ent FROM {EPISODES} s, "
        "LATERAL (SELECT DISTINCT unnest(s.entities[1:20]) AS ent) x, "
        f"LATERAL (SELECT e.id FROM {EPISODES} e WHERE e.tenant_id = %s AND e.entities @> ARRAY[x.ent] "
        f"AND e.id <> s.id AND {where} LIMIT %s) n "
        "WHERE s.tenant_id = %s AND s.id = ANY(%s)"
    )
    by_link = (
        f"SELECT l.src_id, l.dst_id, 'link', l.kind FROM {LINKS} l JOIN {EPISODES} e ON e.id = l.dst_id "
        f"WHERE l.tenant_id = %s AND e.tenant_id = %s AND l.src_id = ANY(%s) AND l.kind <> %s AND {where}"
    )
    rows = db.fetch(
        f"{by_entity} UNION ALL {by_link}",
        [
            *(tenant.pk, *params, rare + 1, tenant.pk, list(seeds)),
            *(tenant.pk, tenant.pk, list(seeds), LinkKind.MERGED_INTO.value, *params),
        ],
        tenant=tenant,
    )
    found = [Neighbour(int(s), int(n), via, str(name)) for s, n, via, name in rows]
    holders: dict[tuple[int, str], int] = {}
    for hop in found:
        if hop.via == "entity":
            holders[(hop.seed, hop.name)] = holders.get((hop.seed, hop.name), 0) + 1
    return [h for h in found if h.via == "link" or holders[(h.seed, h.name)] <= rare]


def name_holders(
    tenant: Tenant, owner: Mapping[str, str], names: Sequence[str], limit: int
) -> dict[str, list[tuple[int, datetime]]]:
    """Per name, up to ``limit`` of the owner's visible episodes (``owner``: user_id and agent_id)
    that hold it among their entities or its words in their text as full text reads them (so
    "Сбербанке" finds "Сбербанка"), with their last turn's time. Each name is looked up through the
    GIN indexes episode_entities and episode_search_vector with that limit, so a name many episodes
    hold costs ``limit`` rows."""
    if not names:
        return {}
    rows = db.fetch(
        "SELECT x.name, h.id, h.last_occurred_at FROM unnest(%s::text[], %s::text[]) AS x(name, words), "
        f"LATERAL (SELECT e.id, e.last_occurred_at FROM {EPISODES} e WHERE e.tenant_id = %s "
        f"AND (e.entities @> ARRAY[x.name]::varchar[] OR e.search_vector @@ plainto_tsquery('{TEXT_CONFIG}', x.words)) "
        "AND e.user_id = %s "
        "AND e.agent_id = %s AND e.state <> %s LIMIT %s) h",
        [
            list(names),
            [index_text(name) for name in names],
            tenant.pk,
            owner["user_id"],
            owner["agent_id"],
            State.FORGOTTEN.value,
            limit,
        ],
        tenant=tenant,
    )
    out: dict[str, list[tuple[int, datetime]]] = {}
    for name, episode_id, last in rows:
        out.setdefault(str(name), []).append((int(episode_id), last))
    return out
