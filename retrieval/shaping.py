"""A search's hits and an activation's memories in the shapes the answers show: each hit in its
layer's shape (``episodes.shapes``) with the turns chosen for the question within a token budget
(``retrieval.evidence``). The search itself is ``retrieval.services.search``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, overload

import numpy as np

from episodes import shapes
from episodes.models import Episode, Layer, State
from episodes.scope import Scope
from episodes.stores import rows
from lifecycle import scoring
from lifecycle.models import read_policy
from lifecycle.tenant_policy import Policy
from lifecycle.unpack import unpack
from memory_platform.tenancy.models import Tenant

from . import evidence
from .evidence import Budget
from .query import SearchQuery
from .ranking import stats_of
from .services import Hit, SearchResult, record_access, search
from .weights import default_budget


@dataclass
class ShapedSearch:
    """A search's hits in the shape the query asked for (``hit_bodies``), with the search they
    came from: the API's view makes the answer of them (``retrieval.api.answers``)."""

    result: SearchResult
    hits: list[shapes.CompactHit] | list[shapes.Hit]


def search_shaped(
    *,
    tenant: Tenant,
    query: SearchQuery,
    now: datetime,
    may_unpack: bool = True,
    found: Callable[[list[int], list[int]], object] | None = None,
    budget: Budget | None = None,
    policy: Policy | None = None,
) -> ShapedSearch:
    """``POST /search``: each hit in its layer's shape (``episodes.shapes.hit``) with the turns
    chosen across the hits within ``budget`` (``retrieval.evidence``; by default the platform's)
    unless ``depth=deep``, which shows every hit whole and, when
    ``may_unpack`` (a key with the write scope), unpacks the warm and cold hits (back to hot);
    without it they are read whole where they are. ``found`` is told
    the hits' internal ids (to record their uses): those found by the lists, and those reached by a
    hop (a traversal)."""
    result = search(tenant=tenant, query=query, now=now, policy=policy)
    if found is not None:
        found(result.accessed, result.traversed)
    deep = query.depth == "deep"
    if deep and may_unpack:
        for hit in result.hits:
            if hit.episode.layer != Layer.HOT:
                unpack(tenant=tenant, episode_id=hit.episode.pk, now=now, record=False)
    hits = hit_bodies(
        tenant,
        result.hits,
        deep=deep,
        budget=budget,
        view=query.view,
        vector=result.query_vector,
        question=query.text,
    )
    return ShapedSearch(result=result, hits=hits)


@overload
def hit_bodies(
    tenant: Tenant,
    hits: list[Hit],
    *,
    deep: bool,
    budget: Budget | None = None,
    view: Literal["full"] = "full",
    vector: np.ndarray | None = None,
    question: str = "",
) -> list[shapes.Hit]: ...
@overload
def hit_bodies(
    tenant: Tenant,
    hits: list[Hit],
    *,
    deep: bool,
    budget: Budget | None = None,
    view: Literal["compact"],
    vector: np.ndarray | None = None,
    question: str = "",
) -> list[shapes.CompactHit]: ...
@overload
def hit_bodies(
    tenant: Tenant,
    hits: list[Hit],
    *,
    deep: bool,
    budget: Budget | None = None,
    view: str,
    vector: np.ndarray | None = None,
    question: str = "",
) -> list[shapes.CompactHit] | list[shapes.Hit]: ...
def hit_bodies(
    tenant: Tenant,
    hits: list[Hit],
    *,
    deep: bool,
    budget: Budget | None = None,
    view: str = "full",
    vector: np.ndarray | None = None,
    question: str = "",
) -> list[shapes.CompactHit] | list[shapes.Hit]:
    """The hits as ``POST /search`` shows them, their turns read at once: whole with ``deep``, else
    the turns chosen across the hits within ``budget`` (by default the platform's:
    ``retrieval.evidence``) by their similarity to the query's ``vector`` when there is one; each
    in its layer's shape (``episodes.shapes.hit``) or, with ``view="compact"``, as its text
    (``shapes.compact_hit``). The query's text, ``question``, weighs the candidate turns too
    (``evidence.Clues``)."""
    ids = [h.episode.pk for h in hits]
    full = {h.episode.pk for h in hits if shapes.shows_turns(h.episode, deep=deep)}
    budget = budget or default_budget()
    # The turns' similarities to the query, and the text of every turn the choice may show, in the
    # same statement (the evidence is chosen by them).
    unread = [h for h in hits if h.episode.pk not in full] if not deep else []
    around, leading = evidence.candidate_reads(unread)
    turns, similarity = rows.turns_with_similarity(
        tenant,
        ids,
        full=full,
        vector=None if deep else vector,
        around=around,
        leading=leading,
        reach=budget.neighbours,
    )
    shown: list[list[Any] | None] = [None] * len(hits)
    framed: set[int] = set()
    if not deep:
        lists = [turns[h.episode.pk] for h in hits]
        if question:
            # The question weighs the candidates by their text (read with the turns above; any
            # still missing here).
            missing = {t.pk for row in lists for t in row if not t.text}
            read = rows.turn_texts(
                tenant, [pk for pk in evidence.candidate_ids(hits, lists, budget.neighbours) if pk in missing]
            )
            lists = [[read.get(t.pk, t) for t in row] for row in lists]
        chosen = evidence.choose(hits, lists, budget, similarity=similarity, question=question)
        rows_of = [[row[i] for i in positions] for row, positions in zip(lists, chosen, strict=True)]
        texts = rows.turn_texts(tenant, [t.pk for row in rows_of for t in row if not t.text])
        shown = [[texts.get(t.pk, t) for t in row] for row in rows_of]
        # A compact packed hit's key points or headline frame its turns while tokens remain.
        left = budget.tokens - sum(evidence.turn_tokens(t) for row in rows_of for t in row)
        framed = evidence.packed_framing(hits, left, shapes.packed_text) if view == "compact" else set()
    if view == "compact":
        return [
            shapes.compact_hit(
                h.episode,
                score=h.score,
                turns=turns.get(h.episode.pk, []),
                shown=shown[rank],
                framed=deep or h.episode.pk in framed,
                explain=h.explain,
                similarity=h.similarity,
            )
            for rank, h in enumerate(hits)
        ]
    return [
        shapes.hit(
            h.episode,
            score=h.score,
            turns=turns.get(h.episode.pk, []),
            shown=shown[rank],
            matched=h.matched,
            explain=h.explain,
            similarity=h.similarity,
        )
        for rank, h in enumerate(hits)
    ]


# --- activation ------------------------------------------------------------------------------------
@dataclass
class Activation:
    """The top memories of a kind (``activate``): ``search`` is the search that ranked them when a
    query was given (None when the tenant's priority did)."""

    hits: list[shapes.Hit]
    search: SearchResult | None = None


def activate(
    *,
    tenant: Tenant,
    kind: str,
    query_text: str,
    limit: int | None,
    now: datetime,
    scope: Scope | None = None,
) -> Activation:
    """Top active memories of one event type: by relevance when a query is given, else by the
    tenant's priority (docs/concepts.md#priority: recency, frequency, anchor). ``limit``: the
    policy's ``activation_limit`` when None. Each hit in the full view (``shapes.hit``)."""
    policy = read_policy(tenant)
    limit = limit or policy.activation_limit
    scope = (scope or Scope()).replace(kinds=(kind,), states=(State.ACTIVE,))
    if query_text.strip():
        query = SearchQuery(text=query_text, scope=scope, limit=limit, view="full")
        result = search(tenant=tenant, query=query, now=now, policy=policy)
        return Activation(
            hits=hit_bodies(tenant, result.hits, deep=False, vector=result.query_vector, question=query_text),
            search=result,
        )
    candidates = list(
        Episode.objects.for_tenant(tenant).filter(scope.q()).order_by("-anchor", "-last_accessed_at")[:200]
    )
    scored = [(scoring.priority(stats_of(e), policy, now), e) for e in candidates]
    scored.sort(key=lambda x: -x[0])
    hits = [Hit(episode=e, relevance=0.0, score=p) for p, e in scored[:limit]]
    record_access(tenant=tenant, episode_ids=[h.episode.pk for h in hits], now=now)
    return Activation(hits=hit_bodies(tenant, hits, deep=False))
