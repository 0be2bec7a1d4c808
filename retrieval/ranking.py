"""How search is ranked: the vector and text lists of every tier fused by one weighted RRF
(``fusion``), grouped by episode, then moved by the priority of the tenant's policy
(``lifecycle.scoring.priority``).

score = relevance × (1 + share × priority) × state weight × time, where relevance is the episode's
best fused score and priority (recency, frequency, anchor, and relevance itself, each up to its
policy weight) is in [0, 1]: relevance stays first, and the priority moves a hit by at most
``share`` of itself. The state weight (``STATE_WEIGHTS``) ranks a dormant episode or a delete
candidate below an active one as relevant, without hiding it. When the query names a time
(``episodes.when``), the episodes of that time are lifted by up to ``time`` of their score
(``time_factor``). A candidate that another candidate supersedes (a newer memory that states a
new value of what it says) ranks right below it (``superseders_first``).

Ranking reads a few columns of each candidate, and only of those that can still reach the top.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol, cast

from episodes.layers import State
from episodes.shapes import Explain
from episodes.when import Window, mention_window
from lifecycle import scoring
from lifecycle.tenant_policy import Policy

from .fusion import weighted_rrf

if TYPE_CHECKING:
    from episodes.models import Episode
    from episodes.stores.hot import Feedback
    from episodes.stores.rows import RankRow

    #: Reads the rank rows of these candidates (with the days they mention when the flag is set):
    #: ``episodes.stores.rows.rank_rows`` for one tenant.
    ReadRows = Callable[[Sequence[int], bool], list[RankRow]]


@dataclass(frozen=True)
class RetrievalWeights:
    """The fusion of a search: list weights and RRF k (docs/concepts.md#fusion), the priority's share, how
    many candidates each list gives, and the hot KNN query's pseudo-relevance feedback."""

    vector: float
    text: float
    k: int
    priority: float
    candidates: int
    feedback: Feedback
    #: How far a query's time expression lifts the episodes of that time (``time_factor``).
    time: float = 0.0
    #: Whether search follows one hop from its best candidates (``retrieval.hops``), and the share
    #: of a seed's relevance an episode reached that way gets.
    hops: bool = False
    hop_weight: float = 0.0


#: How far each state moves a hit down: a dormant episode (low activity: docs/concepts.md#states) or a
#: candidate for deletion is still found, below active ones of about the same relevance: it loses ties and
#: near-ties (near the top of a fused list one rank is worth about 1/(k+1) of the score: 1.6% at k = 60, 9% at
#: the default k = 10). Larger factors buried old memories (docs/decisions/0015). At most 1, so
#: ``rank_candidates``'s bound (the highest lift) still holds.
STATE_WEIGHTS: dict[str, float] = {State.ACTIVE: 1.0, State.DORMANT: 0.98, State.DELETE_CANDIDATE: 0.95}


class Match(Protocol):
    """One entry of a tier's list: a turn of an episode, or (``turn_id`` None) an episode by its
    own shape or centroid (``episodes.stores.hot_replies.HotHit``, ``archive.ArchiveHit``)."""

    @property
    def episode_id(self) -> int: ...
    @property
    def turn_id(self) -> int | None: ...
    @property
    def score(self) -> float: ...
    #: The tier that found it: "hot" (Redis) or "postgres".
    @property
    def source(self) -> str: ...


MIN_SHARE = 0.01


def interleaved(lists: Sequence[tuple[Sequence[Match], float]]) -> list[Match]:
    """Text lists of several tiers as one. The tiers' text scores are not one scale (BM25 over the
    hot documents' statistics, ``ts_rank`` in Postgres), so each list is placed by rank and by its
    tier's share ``s`` of the tenant's turns: its r-th match stands at r / √s.

    Two estimates bound that place. Were relevance spread evenly over the turns, a tier's r-th
    match would stand about where the r/s-th stands in one index of every turn; but a question
    has an answer, and where a tier holds it, it is mostly that tier's first match whatever the
    tier's size, which puts the r-th match of every tier at r. The even spread (r/s) buries the few
    hot sessions of an aged tenant under its many packed ones; the answer's prior (r) buries packed
    evidence under hot matches; the geometric mean of the two loses least of either
    (docs/decisions/0032-tiers-text-lists-by-rank-over-root-share-and-one-hop.md). Each share counts at least
    ``MIN_SHARE``: a tier that holds next to nothing, such as hot episodes not yet indexed, still
    places its matches. Ties keep the lists' order."""
    placed = [
        (rank / math.sqrt(max(share, MIN_SHARE)), order, rank, match)
        for order, (found, share) in enumerate(lists)
        for rank, match in enumerate(found, start=1)
    ]
    placed.sort(key=lambda p: p[:3])
    return [match for *_, match in placed]


def _key(match: Match) -> tuple[str, int]:
    return ("turn", match.turn_id) if match.turn_id is not None else ("episode", match.episode_id)


@dataclass
class Fusion:
    """One weighted RRF over the vector and text lists of every tier (docs/concepts.md#fusion), grouped by
    episode: an episode's relevance is its best item's fused score, wherever it lives, so every
    tier's episodes compete on one scale."""

    #: Per episode, its matched turns and their fused scores, best first.
    turns: dict[int, list[tuple[int, float]]]
    relevance: dict[int, float]
    explain: dict[int, Explain]


def fuse(vector: Sequence[Match], text: Sequence[Match], weights: RetrievalWeights) -> Fusion:
    match_of = {_key(m): m for m in [*vector, *text]}
    fused = weighted_rrf(
        {"vector": [_key(m) for m in vector], "text": [_key(m) for m in text]},
        {"vector": weights.vector, "text": weights.text},
        k=weights.k,
    )
    out = Fusion(turns={}, relevance={}, explain={})
    for item in fused:
        key = cast(tuple[str, int], item.key)
        kind, pk = key
        match = match_of[key]
        episode_id = match.episode_id
        if kind == "turn":
            out.turns.setdefault(episode_id, []).append((pk, item.score))
        if episode_id not in out.relevance:  # best first: the episode's first item is its best
            out.relevance[episode_id] = item.score
            out.explain[episode_id] = {
                "source": match.source,
                "best_turn_id": pk if kind == "turn" else None,
                "vector_rank": item.ranks.get("vector"),
                "text_rank": item.ranks.get("text"),
                "rrf": item.score,
            }
    return out


def stats_of(row: RankRow | Episode) -> scoring.EpisodeStats:
    """What the priority reads of a candidate."""
    return scoring.EpisodeStats(
        created_at=row.created_at,
        first_occurred_at=row.first_occurred_at,
        access_count=row.access_count,
        last_accessed_at=row.last_accessed_at,
        anchor=bool(row.anchor),
    )


_DAY = timedelta(days=1)


#: A loose window ("recently", "a few weeks ago") lifts by this share of the boost a named day,
#: month or year gets: it says little about which memories are meant (docs/decisions/0063).
LOOSE_SHARE = 0.125


def time_factor(row: RankRow, when: Sequence[Window], share: float) -> float:
    """1 + ``share`` for an episode that lies in a day, month or year the query names (a loose
    window's ``LOOSE_SHARE`` of it), less the farther it lies outside (``closeness``), 1 without
    a window. The best window counts."""
    if not when or not share:
        return 1.0
    mentioned = [mention_window(day) for day in row.mentioned]
    return 1.0 + share * max(
        (LOOSE_SHARE if w.loose else 1.0)
        * closeness(w, row.first_occurred_at, row.last_occurred_at, mentioned)
        for w in when
    )


def closeness(window: Window, first: datetime, last: datetime, mentioned: Sequence[Window] = ()) -> float:
    """How far an episode that occurred over [first, last] and mentions the days ``mentioned``
    lies in ``window``: 1 inside, down to 0 outside.

    A day, a month or a year the query names has exact edges: an episode a day outside is lifted
    by half, one 41 days outside September by a fortieth, so the named month's episodes come
    first unless another is much more relevant. A loose window ("recently", "a few weeks ago")
    loses half at one window's width away. A day the episode's turns mention counts by the share
    of it inside the window: "yesterday" said on 17 March is wholly inside "on March 16", "last
    week" a seventh inside it (docs/decisions/0042-time-at-the-turn.md)."""
    edge = max(window.width, _DAY) if window.loose else _DAY
    occurred = 1.0 / (1.0 + window.distance(first, last) / edge)
    return max([occurred, *(window.share_inside(day) for day in mentioned)])


def rank_candidates(
    read: ReadRows,
    relevance: dict[int, float],
    limit: int,
    weights: RetrievalWeights,
    when: Sequence[Window] = (),
) -> dict[int, RankRow]:
    """The candidates that can still reach the top ``limit``, with what ranking reads (``read``).

    The priority lifts a score by at most ``1 + weights.priority * scoring.PRIORITY_MAX`` (and a
    time the query names by at most ``1 + weights.time``), so a candidate below the limit-th
    relevance divided by that factor cannot overtake it: it is never read. (Forgotten candidates
    drop out here; the bar is then lowered and more are read.)
    """
    order = sorted(relevance, key=lambda pk: -relevance[pk])
    lift = (1.0 + weights.priority * scoring.PRIORITY_MAX) * (1.0 + weights.time if when else 1.0)
    ranked: dict[int, RankRow] = {}
    position = 0
    while position < len(order):
        usable = sorted((relevance[pk] for pk in ranked), reverse=True)
        if len(usable) >= limit:
            bar = usable[limit - 1] / lift
        else:
            # Not enough usable candidates read yet: count the unread ones (in relevance order,
            # below every read one) as usable until read.
            bar = relevance[order[min(position + limit - len(usable), len(order)) - 1]] / lift
        end = position
        while end < len(order) and relevance[order[end]] >= bar:
            end += 1
        if end == position:
            break
        ranked.update((row.pk, row) for row in read(order[position:end], bool(when)))
        position = end
    return with_superseders(read, ranked, relevance, when)


def with_superseders(
    read: ReadRows, ranked: dict[int, RankRow], relevance: dict[int, float], when: Sequence[Window]
) -> dict[int, RankRow]:
    """``ranked`` and the candidates that supersede one of them: whatever its relevance, a
    superseder ranks above what it supersedes (``superseders_first``), so it must be read."""
    tried: set[int] = set()
    while True:
        missing = {
            pk for row in ranked.values() for pk in row.superseded_by if pk in relevance and pk not in ranked
        } - tried
        if not missing:
            return ranked
        tried |= missing
        ranked.update((row.pk, row) for row in read(sorted(missing), bool(when)))


def rerank(
    ranked: dict[int, RankRow],
    relevance: dict[int, float],
    weights: RetrievalWeights,
    policy: Policy,
    now: datetime,
    when: Sequence[Window] = (),
) -> list[tuple[int, float, dict[str, float]]]:
    """(episode id, score, score parts), best first: relevance moved by the tenant's priority
    and by the time the query names (``when``)."""
    if not relevance:
        return []
    top = max(relevance.values()) or 1.0
    out = []
    for episode_id, row in ranked.items():
        rel = relevance[episode_id] / top  # 0-1
        terms = scoring.priority_terms(stats_of(row), policy, now, relevance=rel)
        priority = scoring.priority_of(terms)
        state = STATE_WEIGHTS.get(row.state, 1.0)
        timed = time_factor(row, when, weights.time)
        score = relevance[episode_id] * (1.0 + weights.priority * priority) * state * timed
        parts = {k: v for k, v in terms.items() if k != "relevance"}
        parts.update(relevance=rel, priority=priority, state=state)
        if when:
            parts["time"] = timed
        out.append((episode_id, score, parts))
    out = superseders_first(out, ranked)
    out.sort(key=lambda x: -x[1])
    return out


#: How far above what it supersedes a superseder is placed: just above, as a tie broken its way.
SUPERSEDER_MARGIN = 1.0001


def superseders_first(
    scored: list[tuple[int, float, dict[str, float]]], ranked: dict[int, RankRow]
) -> list[tuple[int, float, dict[str, float]]]:
    """Each candidate that supersedes another candidate (a newer memory of the same owner that
    states a new value of what the older one says: ``lifecycle.updates``) scored just above it when
    it scored below. Only the superseder moves, into the older memory's place: the older one drops
    by one, so a question about the past still finds it right below, and no other candidate moves
    relative to the rest. Superseders are placed oldest first, so a chain of updates ends newest on
    top (docs/decisions/0044-updates-above-what-they-replace.md)."""
    score = {pk: value for pk, value, _ in scored}
    parts = {pk: p for pk, _, p in scored}
    pairs = [(newer, row.pk) for row in ranked.values() for newer in row.superseded_by if newer in score]
    # A superseder's last turn is later than anything it supersedes: by that order, every lift of
    # an episode is made before another is placed above it.
    for newer, older in sorted(pairs, key=lambda pair: (ranked[pair[0]].last_occurred_at, pair)):
        lifted = score[older] * SUPERSEDER_MARGIN
        if score[newer] < lifted:
            parts[newer]["supersedes"] = lifted / score[newer] if score[newer] else 0.0
            score[newer] = lifted
    return [(pk, score[pk], parts[pk]) for pk, _, _ in scored]
