"""Reads of the tenant's episodes; every one takes the tenant. Their shapes are ``episodes.shapes``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from django.db.models import Q, QuerySet

from memory_platform import db
from memory_platform.tenancy.models import Tenant

from . import public_ids, shapes
from .models import Episode, Link, LinkKind, State
from .scope import Scope
from .stores.tables import EPISODES, LINKS

#: States whose links count for an episode's degree (a forgotten neighbour's link does not).
_LIVE = [State.ACTIVE, State.DORMANT, State.DELETE_CANDIDATE]


def episodes_for(tenant: Tenant, scope: Scope | None = None) -> QuerySet[Episode]:
    """The tenant's episodes in ``scope`` (by default: every episode but the forgotten)."""
    return Episode.objects.for_tenant(tenant).filter((scope or Scope()).q())


def index_backlog(*, tenant: Tenant) -> int:
    """How many of the tenant's episodes wait for a worker to bring their hot index entries up to
    date (written with ``async``, or missed while Redis was down): one count on the partial index
    ``episode_needs_reindex``."""
    return Episode.objects.for_tenant(tenant).filter(needs_reindex=True).count()


def named_q(references: Sequence[public_ids.Reference]) -> Q:
    """What selects the episodes ``references`` name: public ids and (transition) old integer ids."""
    public = [r for r in references if isinstance(r, str)]
    legacy = [r for r in references if isinstance(r, int)]
    return Q(public_id__in=public) | Q(pk__in=legacy)


def episode_get(*, tenant: Tenant, reference: public_ids.Reference) -> Episode | None:
    """The tenant's visible episode a path names (``public_ids.parse``), in one statement."""
    return episodes_for(tenant).filter(named_q([reference])).first()


class Named(NamedTuple):
    """An episode a caller named: its internal and its public id."""

    pk: int
    public_id: str


def episodes_named(
    tenant: Tenant, references: Sequence[public_ids.Reference]
) -> dict[public_ids.Reference, Named]:
    """The tenant's episodes (forgotten ones included) that ``references`` name (``public_ids.parse``),
    by reference. Another tenant's episode is not found, like none."""
    if not references:
        return {}
    rows = Episode.objects.for_tenant(tenant).filter(named_q(references)).values_list("pk", "public_id")
    wanted = set(references)
    found: dict[public_ids.Reference, Named] = {}
    for pk, public_id in rows:
        for reference in (public_id, pk):
            if reference in wanted:
                found[reference] = Named(pk, public_id)
    return found


def public_ids_of(tenant: Tenant, episode_ids: Iterable[int]) -> dict[int, str]:
    """The public ids of the tenant's episodes with these internal ids."""
    rows = Episode.objects.for_tenant(tenant).filter(pk__in=list(episode_ids)).values_list("pk", "public_id")
    return dict(rows)


def episode_list(
    *, tenant: Tenant, scope: Scope, cursor: str | None, limit: int
) -> tuple[list[Episode], str | None]:
    """A page of the tenant's episodes in ``scope``, newest first (by when they were made), and the
    cursor of the next: the public id of this page's last episode. Raises ValueError for a
    malformed cursor, LookupError for one that names no episode of the tenant."""
    qs = episodes_for(tenant, scope)
    if cursor:
        after = episodes_named(tenant, [public_ids.parse(cursor)])
        if not after:
            raise LookupError("the cursor names no memory of yours; start again without one")
        qs = qs.filter(pk__lt=next(iter(after.values())).pk)
    page = list(qs.order_by("-pk")[: limit + 1])
    next_cursor = page[limit - 1].public_id if len(page) > limit else None
    return page[:limit], next_cursor


def degrees(tenant: Tenant, episode_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """(in_degree, out_degree) per episode, derived from links, never stored."""
    return {pk: (0, 0) for pk in episode_ids} | _degree_counts(tenant, list(episode_ids))


def tenant_degrees(tenant: Tenant) -> dict[int, tuple[int, int]]:
    """``degrees`` of every episode of the tenant with a link (absent: (0, 0))."""
    return _degree_counts(tenant, None)


def _degree_counts(tenant: Tenant, episode_ids: list[int] | None) -> dict[int, tuple[int, int]]:
    """(in, out) of the episodes with a link (of ``episode_ids``, or of the whole tenant), counted on
    the links alone, a GROUP BY each way in one statement, each link's other end joined on
    (tenant, id) and counted while it is live. Joining every episode with its links both ways
    took seconds a tick over a whole tenant (docs/decisions/0056)."""

    def each_way(way: int, counted: str, other: str) -> str:
        only = f" AND l.{counted} = ANY(%s)" if episode_ids is not None else ""
        return (
            f"SELECT {way}, l.{counted}, count(*) FROM {LINKS} l JOIN {EPISODES} o "
            f"ON o.tenant_id = l.tenant_id AND o.id = l.{other} "
            f"WHERE l.tenant_id = %s AND o.state = ANY(%s){only} GROUP BY l.{counted}"
        )

    params: list[Any] = [tenant.pk, _LIVE] + ([episode_ids] if episode_ids is not None else [])
    rows = db.fetch(
        f"{each_way(0, 'dst_id', 'src_id')} UNION ALL {each_way(1, 'src_id', 'dst_id')}",
        params * 2,
        tenant=tenant,
    )
    found: dict[int, list[int]] = {}
    for way, pk, n in rows:
        found.setdefault(int(pk), [0, 0])[way] = int(n)
    return {pk: (ins, outs) for pk, (ins, outs) in found.items()}


def links_of(tenant: Tenant, episode_id: int) -> shapes.MemoryLinks:
    links = Link.objects.for_tenant(tenant)
    out_links = links.filter(src_id=episode_id).values_list("dst__public_id", "kind")
    in_links = links.filter(dst_id=episode_id).values_list("src__public_id", "kind")
    return {
        "out": [{"episode_id": d, "kind": k} for d, k in out_links],
        "in": [{"episode_id": s, "kind": k} for s, k in in_links],
    }


def superseded_by(tenant: Tenant, episode_ids: Iterable[int]) -> dict[int, str]:
    """Per episode that a visible newer one supersedes (``LinkKind.SUPERSEDES``), the public id of
    the newest that does; episodes nothing supersedes are absent. One statement, through the
    index link_tenant_dst."""
    links = (
        Link.objects.for_tenant(tenant)
        .filter(kind=LinkKind.SUPERSEDES, dst_id__in=list(episode_ids))
        .exclude(src__state=State.FORGOTTEN)
        .order_by("dst_id", "src__last_occurred_at", "src_id")
        .values_list("dst_id", "src__public_id")
    )
    return dict(links)  # the newest last: it wins


def episode_detail(*, tenant: Tenant, episode: Episode, deep: bool = False) -> shapes.Memory:
    """One episode as ``GET /memories/{id}`` shows it (``shapes.resource``)."""
    turns = []
    if shapes.shows_turns(episode, deep=deep):
        turns = list(episode.turns.filter(tenant=tenant).order_by("seq", "id"))
    return shapes.resource(
        episode,
        turns=turns,
        degree=degrees(tenant, [episode.pk])[episode.pk],
        links=links_of(tenant, episode.pk),
        deep=deep,
    )


def episode_page(*, tenant: Tenant, episodes: list[Episode]) -> list[shapes.MemoryItem]:
    """A page of list items (``shapes.list_item``), degrees read in one statement."""
    degree = degrees(tenant, [e.pk for e in episodes])
    return [shapes.list_item(e, degree[e.pk]) for e in episodes]
