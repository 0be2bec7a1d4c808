"""The scores as pure functions of (episode stats, policy, now): the activity score, FSRS-6
retrievability, the ADR weight and the priority (docs/concepts.md#scores).

Nothing here reads the clock, the database or Redis: the tick, the read path and the admin pass
``now`` and the counts they already hold, so a replay with the same inputs gives the same numbers.
A policy is a ``lifecycle.tenant_policy.Policy`` (a saved or an edited row's values).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from fsrs import Card, Rating, Scheduler
from fsrs import State as CardState

from episodes.layers import Layer, State

from .tenant_policy import Policy

#: How a use of a memory counts as an FSRS review (docs/concepts.md#fsrs-retrievability-and-stability).
RATINGS: dict[str, Rating] = {
    "access": Rating.Good,  # returned by a search or read
    "unpack": Rating.Easy,  # deep unpack: the agent needed all of it
    "unused": Rating.Hard,  # a hit the agent reported as unused through feedback
}


@dataclass(frozen=True)
class EpisodeStats:
    """What the scores need to know about one episode; degrees come from the link table."""

    created_at: datetime
    first_occurred_at: datetime | None = None
    in_degree: int = 0
    out_degree: int = 0
    access_count: int = 0
    traverse_count: int = 0
    last_accessed_at: datetime | None = None
    last_linked_at: datetime | None = None
    anchor: bool = False
    stability: float | None = None
    difficulty: float | None = None
    last_review_at: datetime | None = None
    relevance: float | None = None

    @classmethod
    def from_episode(cls, episode: Any, in_degree: int = 0, out_degree: int = 0) -> EpisodeStats:
        return cls(
            created_at=episode.created_at,
            first_occurred_at=getattr(episode, "first_occurred_at", None),
            in_degree=in_degree,
            out_degree=out_degree,
            access_count=episode.access_count,
            traverse_count=episode.traverse_count,
            last_accessed_at=episode.last_accessed_at,
            last_linked_at=episode.last_linked_at,
            anchor=bool(episode.anchor),
            stability=episode.stability,
            difficulty=episode.difficulty,
            last_review_at=episode.last_review_at,
        )

    @property
    def born_at(self) -> datetime:
        """An imported conversation is as old as when it happened, not as when it arrived."""
        if self.first_occurred_at is not None and self.first_occurred_at < self.created_at:
            return self.first_occurred_at
        return self.created_at

    @property
    def last_touched_at(self) -> datetime:
        return self.last_accessed_at or self.born_at


def _seconds(now: datetime, then: datetime) -> float:
    # A timestamp a little in the future (clock skew between processes) counts as "just now".
    return max(0.0, (now - then).total_seconds())


def _days(now: datetime, then: datetime) -> float:
    return _seconds(now, then) / 86_400


# --- activity score ---------------------------------------------------------------------------


def activity_terms(stats: EpisodeStats, policy: Policy, now: datetime) -> dict[str, float]:
    """The activity score term by term (the admin and the search response show the parts)."""
    access = 0.0
    if stats.last_accessed_at is not None:
        access = math.exp(-_seconds(now, stats.last_accessed_at) / 3600 / policy.t_access_hours)
    link = 0.0  # never followed through a link: no recent-link signal
    if stats.last_linked_at is not None:
        link = math.exp(-_seconds(now, stats.last_linked_at) / 3600 / policy.t_link_hours)
    return {
        "in_degree": policy.coef_in * math.log1p(stats.in_degree),
        "out_degree": policy.coef_out * math.log1p(stats.out_degree),
        "access_count": policy.coef_access * math.log1p(stats.access_count),
        "traverse_count": policy.coef_traverse * math.log1p(stats.traverse_count),
        "recent_access": policy.coef_recent_access * access,
        "recent_link": policy.coef_recent_link * link,
        "age": -policy.coef_age * _days(now, stats.born_at) / policy.t_age_days,
    }


def activity_score(stats: EpisodeStats, policy: Policy, now: datetime) -> float:
    """A·ln(1+in) + B·ln(1+out) + C·ln(1+access) + D·ln(1+traverse)
    + E·e^(−Δaccess/T_access) + F·e^(−Δlink/T_link) − G·age/T_age  (docs/concepts.md#activity-score)."""
    return sum(activity_terms(stats, policy, now).values())


def state_for(
    score: float,
    policy: Policy,
    *,
    in_degree: int = 0,
    idle_days: float = 0.0,
    anchor: bool = False,
) -> str:
    """States from the activity score (docs/concepts.md#states); a delete candidate is only ever marked, never
    deleted."""
    if score >= policy.theta_active:
        return State.ACTIVE
    if (
        score <= policy.theta_delete
        and in_degree == 0
        and idle_days >= policy.delete_after_days
        and not anchor  # anchors never decay
    ):
        return State.DELETE_CANDIDATE
    return State.DORMANT


def state_of(stats: EpisodeStats, policy: Policy, now: datetime) -> str:
    return state_for(
        activity_score(stats, policy, now),
        policy,
        in_degree=stats.in_degree,
        idle_days=_days(now, stats.last_touched_at),
        anchor=stats.anchor,
    )


def is_merge_candidate(score: float, policy: Policy, *, link_count: int, similarity: float) -> bool:
    """A merge candidate: low score, few links, semantically overlapping (same kind is the caller's
    filter)."""
    return (
        score < policy.theta_active
        and link_count <= policy.merge_max_links
        and similarity >= policy.merge_similarity
    )


# --- FSRS-6 retrievability ---------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _scheduler(parameters: tuple[float, ...], desired_retention: float) -> Scheduler:
    # Fuzzing draws random numbers; intervals are not used here, but determinism is cheap to keep.
    return Scheduler(parameters=parameters, desired_retention=desired_retention, enable_fuzzing=False)


def scheduler_for(policy: Policy) -> Scheduler:
    return _scheduler(tuple(float(p) for p in policy.fsrs_parameters), float(policy.desired_retention))


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)  # the fsrs package insists on datetime.timezone.utc


def _card(stats: EpisodeStats, scheduler: Scheduler) -> Card:
    """The episode as an FSRS card. Never reviewed: its creation counts as a first ``Good`` review."""
    if stats.stability is not None and stats.difficulty is not None:
        last = stats.last_review_at or stats.last_touched_at
        return Card(
            card_id=0,
            state=CardState.Review,
            stability=stats.stability,
            difficulty=stats.difficulty,
            due=_utc(last),
            last_review=_utc(last),
        )
    born = _utc(stats.born_at)
    card, _ = scheduler.review_card(Card(card_id=0, due=born), Rating.Good, review_datetime=born)
    return card


def retrievability(stats: EpisodeStats, policy: Policy, now: datetime) -> float:
    """FSRS-6 R(t, S), the probability the memory is still recalled now (whole days, as in fsrs)."""
    scheduler = scheduler_for(policy)
    return float(scheduler.get_card_retrievability(_card(stats, scheduler), current_datetime=_utc(now)))


def review(stats: EpisodeStats, policy: Policy, rating: Rating | str, now: datetime) -> tuple[float, float]:
    """One use of the episode as an FSRS review; returns the new (stability, difficulty)."""
    if isinstance(rating, str):
        if rating not in RATINGS:
            raise ValueError(f"unknown review kind {rating!r}; choose one of {sorted(RATINGS)}")
        rating = RATINGS[rating]
    scheduler = scheduler_for(policy)
    card, _ = scheduler.review_card(_card(stats, scheduler), rating, review_datetime=_utc(now))
    assert card.stability is not None and card.difficulty is not None
    return float(card.stability), float(card.difficulty)


# --- ADR weight ------------------------------------------------------------------------------


def adr_weight(stats: EpisodeStats, policy: Policy, now: datetime) -> float:
    """w = w0 · decay_factor ** age_days, floored at min_weight."""
    decayed = policy.adr_initial_weight * policy.adr_decay_factor ** _days(now, stats.born_at)
    return max(policy.adr_min_weight, decayed)


def adr_should_archive(
    stats: EpisodeStats, policy: Policy, now: datetime, significance: float | None = None
) -> bool:
    """The ADR archive rule: age > archive_after_days OR weight < archive_weight OR significance
    (the priority) < archive_significance; anchors stay."""
    if stats.anchor:
        return False
    if significance is None:
        significance = priority(stats, policy, now)
    return (
        _days(now, stats.born_at) > policy.adr_archive_after_days
        or adr_weight(stats, policy, now) < policy.adr_archive_weight
        or significance < policy.adr_archive_significance
    )


# --- priority ---------------------------------------------------------------------------------

#: The priority is bounded to [0, 1] whatever the policy's weights.
PRIORITY_MAX = 1.0


def priority_terms(
    stats: EpisodeStats, policy: Policy, now: datetime, relevance: float | None = None
) -> dict[str, float]:
    if relevance is None:
        relevance = stats.relevance
    idle_days = _days(now, stats.last_touched_at)
    frequency = min(1.0, math.log1p(stats.access_count) / math.log1p(policy.priority_frequency_cap))
    return {
        "recency": policy.priority_recency_weight * math.exp(-idle_days / policy.priority_recency_days),
        "frequency": policy.priority_frequency_weight * frequency,
        "anchor": policy.priority_anchor_weight if stats.anchor else 0.0,
        # a cosine can be negative; an unrelated memory simply gets nothing for relevance
        "relevance": policy.priority_relevance_weight * min(1.0, max(0.0, relevance or 0.0)),
    }


def priority(stats: EpisodeStats, policy: Policy, now: datetime, relevance: float | None = None) -> float:
    """recency (0-0.3) + frequency (0-0.2) + anchor (0.3) + relevance (0-0.2) with the default
    weights, bounded to [0, 1]."""
    return priority_of(priority_terms(stats, policy, now, relevance))


def priority_of(terms: dict[str, float]) -> float:
    """The priority its terms (``priority_terms``) add up to, bounded to [0, 1]."""
    return min(PRIORITY_MAX, max(0.0, sum(terms.values())))


def priority_layer(
    p: float, *, hot_above: float = 0.7, cold_at_or_below: float = 0.3, anchor: bool = False
) -> str:
    """By default > 0.7 hot, 0.3-0.7 warm, <= 0.3 cold; an anchor never goes cold."""
    if p > hot_above:
        return Layer.HOT
    if p > cold_at_or_below or anchor:
        return Layer.WARM
    return Layer.COLD


# --- the layer an episode belongs in under the policy's rule ---------------------------------


_LAYER_RANK: dict[str, int] = {Layer.HOT: 0, Layer.WARM: 1, Layer.COLD: 2}


def layer_for(stats: EpisodeStats, policy: Policy, now: datetime) -> str:
    """Where the episode belongs by its own signals (the per-session cap and tenant quota are the
    tick's, since they compare episodes). Anchors are exempt from every automatic demotion."""
    if stats.anchor:
        return Layer.HOT
    rule = policy.layer_rule
    if rule == "retrievability":
        return priority_layer(
            retrievability(stats, policy, now),
            hot_above=policy.retrievability_hot_above,
            cold_at_or_below=policy.retrievability_cold_at_or_below,
        )
    idle_days = _days(now, stats.last_touched_at)
    by_time = (
        Layer.COLD
        if idle_days >= policy.cold_days
        else Layer.WARM
        if idle_days >= policy.hot_days
        else Layer.HOT
    )
    if rule == "priority":
        # Both the time triggers (hot_days, cold_days) and the priority thresholds apply; without a
        # query no plain episode can pass 0.7, so the priority keeps an episode up, never pushes it down.
        by_priority = priority_layer(
            priority(stats, policy, now),
            hot_above=policy.priority_hot_above,
            cold_at_or_below=policy.priority_cold_at_or_below,
        )
        return min(by_time, by_priority, key=_LAYER_RANK.__getitem__)
    if by_time == Layer.COLD:
        return Layer.COLD
    if rule == "weight":  # ADR: active memory or archive; the archive is warm
        return Layer.WARM if adr_should_archive(stats, policy, now) else Layer.HOT
    if rule == "activity":  # time triggers; the activity score orders cap evictions
        return by_time
    raise ValueError(f"unknown layer rule {rule!r}")


# --- many episodes at once (the tick) ---------------------------------------------------------
#
# The tick scores every episode of a tenant (docs/decisions/0056-tick-at-scale.md). The functions
# below are the ones above over numpy columns, and give the same numbers bit for bit: times are
# integer microseconds, so a difference of two is the exact one datetime arithmetic gives, and
# divided by 10**6 it is the float ``timedelta.total_seconds`` gives; the operations come in the
# same order; exp and log1p are the math module's, element by element (numpy's may differ in the
# last bit). tests/lifecycle/test_scoring.py holds the two to each other.

#: A missing time (``None`` in EpisodeStats) in a column of microseconds.
MISSING = np.iinfo(np.int64).min
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(moment: datetime) -> int:
    """A time as integer microseconds since the epoch (exact)."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


def moment_of(us: int) -> datetime:
    """The time ``micros`` gave, in UTC."""
    return _EPOCH + timedelta(microseconds=int(us))


@dataclass(frozen=True)
class StatsColumns:
    """EpisodeStats of many episodes, an array per field: times in microseconds (``micros``),
    ``MISSING`` for none; stability and difficulty NaN for none."""

    created_at: np.ndarray
    first_occurred_at: np.ndarray
    in_degree: np.ndarray
    out_degree: np.ndarray
    access_count: np.ndarray
    traverse_count: np.ndarray
    last_accessed_at: np.ndarray
    last_linked_at: np.ndarray
    anchor: np.ndarray
    stability: np.ndarray
    difficulty: np.ndarray
    last_review_at: np.ndarray

    def row(self, i: int) -> EpisodeStats:
        """One episode's stats, for the rules computed one by one."""

        def when(column: np.ndarray) -> datetime | None:
            return None if column[i] == MISSING else moment_of(column[i])

        def number(column: np.ndarray) -> float | None:
            return None if math.isnan(column[i]) else float(column[i])

        return EpisodeStats(
            created_at=moment_of(self.created_at[i]),
            first_occurred_at=when(self.first_occurred_at),
            in_degree=int(self.in_degree[i]),
            out_degree=int(self.out_degree[i]),
            access_count=int(self.access_count[i]),
            traverse_count=int(self.traverse_count[i]),
            last_accessed_at=when(self.last_accessed_at),
            last_linked_at=when(self.last_linked_at),
            anchor=bool(self.anchor[i]),
            stability=number(self.stability),
            difficulty=number(self.difficulty),
            last_review_at=when(self.last_review_at),
        )

    def born_at(self) -> np.ndarray:
        first = self.first_occurred_at
        return np.where((first != MISSING) & (first < self.created_at), first, self.created_at)

    def last_touched_at(self) -> np.ndarray:
        return np.where(self.last_accessed_at != MISSING, self.last_accessed_at, self.born_at())


def _seconds_since(now: int, then: np.ndarray) -> np.ndarray:
    return np.maximum(0.0, (now - then) / 1_000_000)


def _days_since(now: int, then: np.ndarray) -> np.ndarray:
    return _seconds_since(now, then) / 86_400


def _exp(values: np.ndarray) -> np.ndarray:
    return np.fromiter(map(math.exp, values.tolist()), dtype=np.float64, count=values.size)


def _log1p_counts(counts: np.ndarray) -> np.ndarray:
    distinct, where = np.unique(counts, return_inverse=True)
    return np.asarray([math.log1p(int(c)) for c in distinct], dtype=np.float64)[where.reshape(-1)]


def _decay(now: int, then: np.ndarray, hours: float) -> np.ndarray:
    """e^(-Δ/T) where there is a time, 0 where there is none (``activity_terms``)."""
    out = np.zeros(then.size)
    known = then != MISSING
    out[known] = _exp(-_seconds_since(now, then[known]) / 3600 / hours)
    return out


def activity_scores(stats: StatsColumns, policy: Policy, now: datetime) -> np.ndarray:
    """``activity_score`` of each episode."""
    at = micros(now)
    total = np.zeros(stats.created_at.size)
    total = total + policy.coef_in * _log1p_counts(stats.in_degree)
    total = total + policy.coef_out * _log1p_counts(stats.out_degree)
    total = total + policy.coef_access * _log1p_counts(stats.access_count)
    total = total + policy.coef_traverse * _log1p_counts(stats.traverse_count)
    total = total + policy.coef_recent_access * _decay(at, stats.last_accessed_at, policy.t_access_hours)
    total = total + policy.coef_recent_link * _decay(at, stats.last_linked_at, policy.t_link_hours)
    return total + -policy.coef_age * _days_since(at, stats.born_at()) / policy.t_age_days


def states_of(stats: StatsColumns, scores: np.ndarray, policy: Policy, now: datetime) -> np.ndarray:
    """``state_of`` of each episode, given its activity score."""
    idle = _days_since(micros(now), stats.last_touched_at())
    active = scores >= policy.theta_active
    delete = (
        ~active
        & (scores <= policy.theta_delete)
        & (stats.in_degree == 0)
        & (idle >= policy.delete_after_days)
        & ~stats.anchor.astype(bool)
    )
    out = np.full(scores.size, State.DORMANT, dtype=object)
    out[active] = State.ACTIVE
    out[delete] = State.DELETE_CANDIDATE
    return out


def layers_for(stats: StatsColumns, rows: np.ndarray, policy: Policy, now: datetime) -> np.ndarray:
    """``layer_for`` of the episodes at positions ``rows``: at once under the `activity` rule (time
    triggers only), one by one under the others."""
    if policy.layer_rule != "activity":
        return np.asarray([layer_for(stats.row(int(i)), policy, now) for i in rows], dtype=object)
    idle = _days_since(micros(now), stats.last_touched_at()[rows])
    out = np.full(rows.size, Layer.HOT, dtype=object)
    out[idle >= policy.hot_days] = Layer.WARM
    out[idle >= policy.cold_days] = Layer.COLD
    out[stats.anchor[rows].astype(bool)] = Layer.HOT
    return out
