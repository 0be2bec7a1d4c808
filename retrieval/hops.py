"""One hop from the best candidates (a use through it is a traversal): episodes that share
a rare entity with one of the first few candidates, or that one of them links to, join the
candidates with a share of that candidate's relevance. An episode found by the lists keeps its
own relevance. A hit that entered this way is counted as a traversal, not an access.

Bounded: ``seeds`` candidates, their first 20 entities, at most ``rare + 1`` rows per entity and
``MAX_HOPS`` new candidates; within the search's scope and tenant (``episodes.stores.rows.one_hop``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from episodes.scope import Scope
from episodes.stores import rows
from memory_platform.tenancy.models import Tenant

#: An entity named by more than this many other episodes relates nothing (a speaker's name).
RARE = 3
#: How many of the most relevant candidates are followed.
SEEDS = 3
#: New candidates a search takes through hops, at most.
MAX_HOPS = 20


@dataclass(frozen=True)
class Hop:
    """How a candidate was reached (through an entity or a link, and its name), and the relevance
    it gets."""

    via: str
    name: str
    relevance: float


def one_hop(
    tenant: Tenant, relevance: Mapping[int, float], scope: Scope, weight: float, seeds: int = SEEDS
) -> dict[int, Hop]:
    """New candidates one hop from the ``seeds`` most relevant ones, each at ``weight`` times its
    seed's relevance (the best seed's when several reach it), best first, at most ``MAX_HOPS``."""
    if not relevance or seeds <= 0 or weight <= 0:
        return {}
    top = sorted(relevance, key=lambda pk: -relevance[pk])[:seeds]
    where, params = scope.sql("e")
    found: dict[int, Hop] = {}
    for n in rows.one_hop(tenant, top, where, params, RARE):
        if n.episode_id in relevance:
            continue
        hop = Hop(via=n.via, name=n.name, relevance=weight * relevance[n.seed])
        known = found.get(n.episode_id)
        if known is None or hop.relevance > known.relevance:
            found[n.episode_id] = hop
    best = sorted(found, key=lambda pk: -found[pk].relevance)[:MAX_HOPS]
    return {pk: found[pk] for pk in best}
