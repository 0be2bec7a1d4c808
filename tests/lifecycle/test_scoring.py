"""Each score's formula (docs/concepts.md#scores) on a worked example computed by hand, plus the shape of each
score."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from fsrs import Rating

from episodes.models import Layer, State
from lifecycle.models import MemoryPolicy
from lifecycle.presets import apply_preset
from lifecycle.scoring import (
    EpisodeStats,
    activity_score,
    activity_terms,
    adr_should_archive,
    adr_weight,
    is_merge_candidate,
    layer_for,
    priority,
    priority_layer,
    retrievability,
    review,
    state_for,
    state_of,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)
D = timedelta(days=1)


def stats(**kw) -> EpisodeStats:
    base = {"created_at": NOW - 15 * D, "last_accessed_at": NOW - 12 * H}
    base.update(kw)
    return EpisodeStats(**base)


@pytest.fixture
def policy() -> MemoryPolicy:
    # unsaved: the scores only read attributes; the worked examples use thresholds 0.5 / 0.0
    return MemoryPolicy(theta_active=0.5, theta_delete=0.0)


# --- activity score -----------------------------------------------------------------------------


def test_activity_score_worked_example(policy):
    s = stats(
        in_degree=3,
        out_degree=1,
        access_count=4,
        traverse_count=2,
        last_linked_at=NOW - 36 * H,
    )
    # By hand, the default coefficients (A 1.0, B 0.8, C 1.2, D 0.8, E 1.5, F 1.0, G 0.3; 24 h, 72 h, 30 d):
    #   1.0·ln4 = 1.386294   0.8·ln2 = 0.554518   1.2·ln5 = 1.931325   0.8·ln3 = 0.878890
    #   1.5·e^(−12/24) = 0.909796   1.0·e^(−36/72) = 0.606531   −0.3·15/30 = −0.15
    terms = activity_terms(s, policy, NOW)
    assert terms["in_degree"] == pytest.approx(1.386294, abs=1e-6)
    assert terms["out_degree"] == pytest.approx(0.554518, abs=1e-6)
    assert terms["access_count"] == pytest.approx(1.931325, abs=1e-6)
    assert terms["traverse_count"] == pytest.approx(0.878890, abs=1e-6)
    assert terms["recent_access"] == pytest.approx(0.909796, abs=1e-6)
    assert terms["recent_link"] == pytest.approx(0.606531, abs=1e-6)
    assert terms["age"] == pytest.approx(-0.15)
    assert activity_score(s, policy, NOW) == pytest.approx(6.117354, abs=1e-6)


@pytest.mark.parametrize("name", ["in_degree", "out_degree", "access_count", "traverse_count"])
def test_activity_grows_with_each_count(policy, name):
    scores = [activity_score(stats(**{name: n}), policy, NOW) for n in (0, 1, 2, 5, 50)]
    assert scores == sorted(scores) and len(set(scores)) == len(scores)


def test_activity_falls_with_time(policy):
    s = stats(access_count=2, last_linked_at=NOW - 2 * H)
    scores = [activity_score(s, policy, NOW + k * D) for k in (0, 1, 7, 30, 365)]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)


def test_never_linked_has_no_recent_link_term_and_future_times_count_as_now(policy):
    assert activity_terms(stats(last_linked_at=None), policy, NOW)["recent_link"] == 0
    skewed = stats(last_accessed_at=NOW + 5 * H)  # clock skew between processes
    assert activity_terms(skewed, policy, NOW)["recent_access"] == pytest.approx(1.5)


def test_imported_episode_is_as_old_as_its_events(policy):
    s = stats(created_at=NOW, first_occurred_at=NOW - 60 * D)
    assert activity_terms(s, policy, NOW)["age"] == pytest.approx(-0.3 * 60 / 30)


def test_states_follow_the_thresholds(policy):
    # theta_active 0.5, theta_delete 0.0, delete_after_days 180
    assert state_for(0.5, policy) == State.ACTIVE
    assert state_for(0.2, policy) == State.DORMANT
    assert state_for(-1.0, policy, in_degree=0, idle_days=200) == State.DELETE_CANDIDATE
    assert state_for(-1.0, policy, in_degree=1, idle_days=200) == State.DORMANT  # something depends on it
    assert state_for(-1.0, policy, in_degree=0, idle_days=30) == State.DORMANT  # used recently
    assert state_for(-1.0, policy, in_degree=0, idle_days=200, anchor=True) == State.DORMANT
    old = stats(created_at=NOW - 400 * D, last_accessed_at=NOW - 400 * D)
    assert state_of(old, policy, NOW) == State.DELETE_CANDIDATE
    assert state_of(stats(access_count=3), policy, NOW) == State.ACTIVE


def test_merge_candidate(policy):
    assert is_merge_candidate(0.1, policy, link_count=1, similarity=0.95)
    assert not is_merge_candidate(0.1, policy, link_count=1, similarity=0.80)
    assert not is_merge_candidate(0.1, policy, link_count=5, similarity=0.95)
    assert not is_merge_candidate(2.0, policy, link_count=0, similarity=0.99)


# --- FSRS-6 retrievability -----------------------------------------------------------------------


def test_retrievability_worked_example(policy):
    # FSRS-6: R(t, S) = (1 + F·t/S)^(−w20) with F chosen so that R(S, S) = 0.9 exactly.
    s = stats(stability=10.0, difficulty=5.0, last_review_at=NOW - 10 * D)
    assert retrievability(s, policy, NOW) == pytest.approx(0.9)
    decay = policy.fsrs_parameters[20]
    factor = 0.9 ** (-1 / decay) - 1
    expected = (1 + factor * 30 / 10) ** -decay
    assert retrievability(s, policy, NOW + 20 * D) == pytest.approx(expected)
    assert retrievability(s, policy, NOW - 10 * D) == pytest.approx(1.0)


def test_retrievability_bounded_and_decreasing(policy):
    s = stats(stability=3.0, difficulty=6.0, last_review_at=NOW)
    values = [retrievability(s, policy, NOW + k * D) for k in (0, 1, 3, 10, 100, 10_000)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert values == sorted(values, reverse=True) and values[0] == 1.0 and values[-1] < 0.5


def test_never_reviewed_episode_counts_its_creation_as_a_good_review(policy):
    s = stats(created_at=NOW - 3 * D, stability=None, difficulty=None)
    # first Good review: S = w2 = 2.3065 days
    decay = policy.fsrs_parameters[20]
    factor = 0.9 ** (-1 / decay) - 1
    assert retrievability(s, policy, NOW) == pytest.approx((1 + factor * 3 / 2.3065) ** -decay)
    stability, difficulty = review(dataclasses.replace(s, created_at=NOW), policy, "access", NOW)
    assert stability == pytest.approx(2.3065)  # same day: short-term stability never falls below S


def test_review_worked_example(policy):
    # FSRS-6, recall after exactly S days (R = 0.9), Good:
    #   S' = S·(1 + e^w8·(11 − D)·S^(−w9)·(e^((1 − R)·w10) − 1))
    #      = 10·(1 + e^1.8722·6·10^(−0.1666)·(e^0.0796 − 1)) = 32.0267
    s = stats(stability=10.0, difficulty=5.0, last_review_at=NOW - 10 * D)
    stability, difficulty = review(s, policy, Rating.Good, NOW)
    assert stability == pytest.approx(32.0267, abs=1e-3)
    assert 1.0 <= difficulty <= 10.0


def test_review_ratings_are_ordered(policy):
    s = stats(stability=5.0, difficulty=5.0, last_review_at=NOW - 7 * D)
    hard, hard_d = review(s, policy, "unused", NOW)
    good, good_d = review(s, policy, "access", NOW)
    easy, easy_d = review(s, policy, "unpack", NOW)
    assert 5.0 < hard < good < easy
    assert hard_d > good_d > easy_d  # a hard review makes the memory harder
    with pytest.raises(ValueError, match="unknown review kind"):
        review(s, policy, "liked", NOW)


def test_reviews_follow_the_tenants_fsrs_parameters(policy):
    s = stats(stability=None, difficulty=None, created_at=NOW - 5 * D)
    tuned = MemoryPolicy()
    tuned.fsrs_parameters = [*policy.fsrs_parameters[:2], 20.0, *policy.fsrs_parameters[3:]]
    assert retrievability(s, tuned, NOW) > retrievability(s, policy, NOW)


# --- ADR weight ---------------------------------------------------------------------------------


def test_adr_weight_worked_example(policy):
    # w = 1.0 · 0.99^10 = 0.904382 ; 0.99^200 = 0.133980, floored at min_weight
    assert adr_weight(stats(created_at=NOW - 10 * D), policy, NOW) == pytest.approx(0.904382, abs=1e-6)
    assert adr_weight(stats(created_at=NOW - 200 * D), policy, NOW) == pytest.approx(0.133980, abs=1e-6)
    policy.adr_min_weight = 0.2
    assert adr_weight(stats(created_at=NOW - 200 * D), policy, NOW) == 0.2


def test_adr_archive_rule(policy):
    young = stats(created_at=NOW - 12 * H, last_accessed_at=NOW)
    assert not adr_should_archive(young, policy, NOW, significance=0.9)
    assert adr_should_archive(young, policy, NOW, significance=0.4)  # significance < 0.5
    assert adr_should_archive(stats(created_at=NOW - 2 * D), policy, NOW, significance=0.9)  # age > 1 day
    policy.adr_archive_after_days = 1000
    assert adr_should_archive(stats(created_at=NOW - 200 * D), policy, NOW, significance=0.9)  # w < 0.3
    assert not adr_should_archive(stats(created_at=NOW - 200 * D, anchor=True), policy, NOW, significance=0)


# --- priority -----------------------------------------------------------------------------------


def test_priority_worked_example(policy):
    # recency 0.3·e^(−7/14) = 0.181959; frequency 0.2·ln5/ln21 = 0.105727; anchor 0.3;
    # relevance 0.2·0.5 = 0.1  ->  0.687686, warm (0.3 < P <= 0.7)
    s = stats(last_accessed_at=NOW - 7 * D, access_count=4, anchor=True)
    p = priority(s, policy, NOW, relevance=0.5)
    assert p == pytest.approx(0.687686, abs=1e-6)
    assert priority_layer(p) == Layer.WARM


def test_priority_bounded_and_monotonic(policy):
    values = []
    for days in (0, 1, 10, 100, 1000):
        for count in (0, 1, 10, 1000):
            for anchor in (False, True):
                for relevance in (-1.0, 0.0, 0.5, 1.0, 3.0):
                    s = stats(last_accessed_at=NOW - days * D, access_count=count, anchor=anchor)
                    values.append(priority(s, policy, NOW, relevance))
    assert all(0.0 <= v <= 1.0 for v in values)
    fresh = stats(last_accessed_at=NOW, access_count=1000, anchor=True)
    assert priority(fresh, policy, NOW, 1.0) == pytest.approx(1.0)
    by_recency = [priority(stats(last_accessed_at=NOW - k * D), policy, NOW) for k in (0, 5, 50)]
    by_count = [priority(stats(access_count=n), policy, NOW) for n in (0, 3, 30)]
    assert by_recency == sorted(by_recency, reverse=True) and by_count == sorted(by_count)
    assert priority(stats(relevance=0.9), policy, NOW) > priority(stats(relevance=0.1), policy, NOW)


def test_priority_layers():
    assert priority_layer(0.71) == Layer.HOT
    assert priority_layer(0.7) == Layer.WARM
    assert priority_layer(0.31) == Layer.WARM
    assert priority_layer(0.3) == Layer.COLD
    assert priority_layer(0.1, anchor=True) == Layer.WARM  # an anchor never goes cold


# --- the layer rules ------------------------------------------------------------------------------


def test_layer_for_each_rule(policy):
    recent, idle, forgotten = (stats(last_accessed_at=NOW - k * D) for k in (1, 20, 100))
    assert [layer_for(s, policy, NOW) for s in (recent, idle, forgotten)] == [
        Layer.HOT,
        Layer.WARM,
        Layer.COLD,
    ]
    assert layer_for(dataclasses.replace(forgotten, anchor=True), policy, NOW) == Layer.HOT

    apply_preset(policy, "adr")
    young = stats(created_at=NOW - 6 * H, last_accessed_at=NOW, access_count=20)
    assert layer_for(young, policy, NOW) == Layer.HOT
    assert layer_for(recent, policy, NOW) == Layer.WARM  # 15 days old: archived

    apply_preset(policy, "lsm")  # time triggers, and a priority that can hold an episode up
    assert layer_for(recent, policy, NOW) == Layer.HOT
    assert layer_for(forgotten, policy, NOW) == Layer.COLD
    # 100 days idle, but used a lot and relevant: 0.2 + 0.2 = 0.4 > 0.3 keeps it warm
    kept = dataclasses.replace(forgotten, access_count=20, relevance=1.0)
    assert layer_for(kept, policy, NOW) == Layer.WARM

    apply_preset(policy, "fsrs")
    fresh = stats(stability=30.0, difficulty=5.0, last_review_at=NOW - 2 * D)
    stale = stats(stability=1.0, difficulty=5.0, last_review_at=NOW - 200 * D)
    assert layer_for(fresh, policy, NOW) == Layer.HOT
    assert layer_for(stale, policy, NOW) == Layer.COLD


def test_from_episode_reads_the_model_fields():
    class FakeEpisode:
        created_at = NOW - 3 * D
        first_occurred_at = NOW - 10 * D
        access_count = 2
        traverse_count = 1
        last_accessed_at = NOW - D
        last_linked_at = None
        anchor = True
        stability = 4.0
        difficulty = 3.0
        last_review_at = NOW - D

    s = EpisodeStats.from_episode(FakeEpisode(), in_degree=2, out_degree=1)
    assert (s.in_degree, s.out_degree, s.access_count, s.anchor, s.stability) == (2, 1, 2, True, 4.0)
    assert s.born_at == NOW - 10 * D
    assert math.isclose(activity_terms(s, MemoryPolicy(), NOW)["age"], -0.1)


# --- many episodes at once ----------------------------------------------------------------------


def _columns(rng, n: int):
    """Random stats with the edges the rules compare at: idle exactly hot_days and cold_days,
    times in the future, missing times, an import older than its arrival, zero counts."""
    from lifecycle.scoring import MISSING, StatsColumns, micros

    now = micros(NOW)
    day = 86_400_000_000
    created = now - rng.integers(-day, 400 * day, size=n)
    first = np.where(rng.random(n) < 0.3, created - rng.integers(0, 50 * day, size=n), created)
    idle = rng.choice([14 * day, 90 * day, 180 * day, 0, -3_000_000], size=n)
    idle = np.where(rng.random(n) < 0.5, rng.integers(-day, 300 * day, size=n), idle)
    accessed = np.where(rng.random(n) < 0.1, MISSING, now - idle)
    linked = np.where(rng.random(n) < 0.5, MISSING, now - rng.integers(0, 100 * day, size=n))
    reviewed = np.where(rng.random(n) < 0.5, MISSING, now - rng.integers(0, 300 * day, size=n))
    remembered = rng.random(n) < 0.5
    return StatsColumns(
        created_at=created,
        first_occurred_at=np.where(rng.random(n) < 0.05, MISSING, first),
        in_degree=rng.integers(0, 4, size=n) * (rng.random(n) < 0.5),
        out_degree=rng.integers(0, 4, size=n),
        access_count=rng.integers(0, 30, size=n) * (rng.random(n) < 0.5),
        traverse_count=rng.integers(0, 5, size=n),
        last_accessed_at=accessed,
        last_linked_at=linked,
        anchor=rng.random(n) < 0.1,
        stability=np.where(remembered, rng.uniform(0.5, 60, size=n), np.nan),
        difficulty=np.where(remembered, rng.uniform(1, 10, size=n), np.nan),
        last_review_at=reviewed,
    )


@pytest.mark.parametrize("preset", [None, "adr", "lsm", "fsrs"])
def test_the_tick_scores_many_episodes_exactly_as_one_by_one(policy, preset):
    """The tick's scores over columns (``activity_scores``, ``states_of``, ``layers_for``) are the
    one-by-one functions' to the last bit, edges included."""
    from lifecycle.scoring import activity_scores, layers_for, states_of

    if preset:
        apply_preset(policy, preset)
    columns = _columns(np.random.default_rng(3), 3000)
    rows = [columns.row(i) for i in range(3000)]
    scores = activity_scores(columns, policy, NOW)
    assert scores.tolist() == [activity_score(s, policy, NOW) for s in rows]
    assert states_of(columns, scores, policy, NOW).tolist() == [state_of(s, policy, NOW) for s in rows]
    every = np.arange(3000)
    assert layers_for(columns, every, policy, NOW).tolist() == [layer_for(s, policy, NOW) for s in rows]
    some = every[::7]
    assert layers_for(columns, some, policy, NOW).tolist() == [layer_for(rows[i], policy, NOW) for i in some]


@pytest.mark.django_db
def test_the_ticks_degrees_are_the_pages_degrees(provided):
    """``tenant_degrees`` (the tick's, on the links alone) counts what ``degrees`` (a page's) does:
    each link whose other end is not forgotten, another tenant's links never."""
    from episodes.models import Episode, Link
    from episodes.selectors import degrees, tenant_degrees
    from tests.conftest import Caller

    from .factories import memory

    tenant = provided.tenant
    a, b, c, gone = (memory(tenant, text=f"m{i}", idle_days=1, seed=i) for i in range(4))
    for src, dst, kind in [(a, b, "related"), (a, b, "references"), (c, a, "related"), (gone, a, "related")]:
        Link.objects.create(tenant=tenant, src_id=src, dst_id=dst, kind=kind)
    Link.objects.create(tenant=tenant, src_id=b, dst_id=gone, kind="related")
    Episode.objects.for_tenant(tenant).filter(pk=gone).update(state=State.FORGOTTEN)
    outsider = Caller("outsider-co", embedder="provided").tenant
    x, y = (memory(outsider, text=f"o{i}", idle_days=1, seed=9 + i) for i in range(2))
    Link.objects.create(tenant=outsider, src_id=x, dst_id=y, kind="related")
    found = tenant_degrees(tenant)
    assert {pk: found.get(pk, (0, 0)) for pk in (a, b, c, gone)} == degrees(tenant, [a, b, c, gone])
    assert found[a] == (1, 2) and found[b] == (2, 0) and x not in found and y not in found
