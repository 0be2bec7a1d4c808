"""The policy preview (docs/decisions/0028): a tick's decisions at ``now`` under a policy, written nowhere,
and the same numbers as the tick then run at that ``now``."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from episodes.models import Episode, Layer
from lifecycle.models import Candidate, JournalEntry, TickRun, policy_row
from lifecycle.tick import TickBusy, _try_lock, _unlock, tick_preview, tick_run

from .factories import NOW, assert_consistent, conversation, layers, memory, strict_thresholds

pytestmark = pytest.mark.django_db(transaction=True)

MOVES = (
    "hot_to_warm",
    "warm_to_cold",
    "warm_gradient",
    "warm_to_hot",
    "cold_to_hot",
    "merge_candidates",
    "purged",
)


@pytest.fixture
def aged(provided):
    tenant = provided.tenant
    strict_thresholds(tenant)  # state changes and delete candidates within this short history
    for n, days in enumerate([1, 3, 20, 40, 120, 300]):
        conversation(tenant, session=f"s{n}", idle_days=days, seed=n)
    memory(tenant, text="Always answer in French.", idle_days=400, anchor=True, seed=99)
    return tenant


def _written(tenant):
    return (
        sorted(
            Episode.objects.across_tenants("test")
            .filter(tenant=tenant)
            .values_list("pk", "layer", "state", "version")
        ),
        JournalEntry.objects.across_tenants("test").filter(tenant=tenant).count(),
        TickRun.objects.across_tenants("test").filter(tenant=tenant).count(),
        Candidate.objects.across_tenants("test").filter(tenant=tenant).count(),
    )


def test_the_preview_writes_nothing_and_the_tick_then_does_what_it_said(aged):
    before = _written(aged)
    preview = tick_preview(tenant=aged, now=NOW)
    assert _written(aged) == before  # nothing in Postgres
    assert_consistent(aged)  # nor in Redis: its documents still match the rows

    counts = preview["counts"]
    assert counts.get("hot_to_warm", 0) >= 2 and counts.get("warm_to_cold", 0) >= 1, counts
    assert any(key.startswith("active_to_") for key in counts), counts
    hot_to_warm = preview["samples"]["hot_to_warm"]
    assert len(hot_to_warm) == min(5, counts["hot_to_warm"])
    assert {s["layer"] for s in hot_to_warm} == {Layer.HOT}  # as they are now, before the move

    run = tick_run(tenant=aged, now=NOW)
    done = {k: v for k, v in run.counts.items() if k not in {"scored", "redis_removed", "redis_indexed"}}
    assert done == counts  # the same numbers, step by step


def test_a_preview_of_an_unsaved_policy_shows_its_own_moves(aged):
    saved = tick_preview(tenant=aged, now=NOW)["counts"]
    policy = policy_row(aged)
    policy.hot_days, policy.cold_days = 2, 10  # shorter: more leave hot, more go cold
    policy.full_clean()
    sooner = tick_preview(tenant=aged, now=NOW, policy=policy.values())["counts"]
    assert sooner["hot_to_warm"] > saved["hot_to_warm"], (saved, sooner)
    assert policy_row(aged).hot_days != 2  # the policy itself was not saved
    assert set(layers(aged).values()) == {Layer.HOT}


def test_no_preview_while_a_tick_runs(aged):
    locked, done = threading.Event(), threading.Event()

    def tick_elsewhere():  # another connection holds the tenant's tick lock, as a running tick does
        try:
            assert _try_lock(aged)
            locked.set()
            done.wait(30)
            _unlock(aged)
        finally:
            connection.close()

    holder = threading.Thread(target=tick_elsewhere)
    holder.start()
    try:
        assert locked.wait(30)
        with pytest.raises(TickBusy):
            tick_preview(tenant=aged, now=NOW)
    finally:
        done.set()
        holder.join()
