"""A tick killed or failing halfway: run again, it loses and duplicates nothing; what it left in
Redis heals within a minute; Redis down during a move is repaired by the next tick; a run left
`running` by a killed process is closed by the next."""

from __future__ import annotations

import pytest
import redis

from episodes.models import Episode, Layer, Turn
from episodes.stores.hot import HotStore, hot_store
from lifecycle.models import JournalEntry, TickRun
from lifecycle.tick import TickInterrupted, tick_run
from memory_platform.tenancy.models import Tenant
from tests.conftest import Caller

from .factories import NOW, assert_consistent, conversation, expected_layers, layers, vectors_near

pytestmark = pytest.mark.django_db(transaction=True)


FAULTS = [
    "after:repair",
    "after:hot_to_warm",
    "compressed:second",
    "moved:first",
    "moved:second",
    "after:warm_to_cold",
    "after:states",
]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_tick_killed_halfway_and_run_again_loses_and_duplicates_nothing(provided, ages, fault):
    tenant = provided.tenant
    expected = expected_layers(tenant, NOW)
    turns_before = dict(
        Episode.objects.across_tenants("test").filter(tenant=tenant).values_list("pk", "turn_count")
    )
    movers = sorted(pk for pk in expected if expected[pk] != "hot")
    label = fault.replace("first", str(movers[0])).replace("second", str(movers[1]))

    def hook(seen):
        if seen == label:
            raise TickInterrupted(f"killed at {seen}")

    with pytest.raises(TickInterrupted):
        tick_run(tenant=tenant, now=NOW, hook=hook)
    failed = TickRun.objects.across_tenants("test").get(tenant=tenant)
    assert failed.status == "failed" and failed.errors[-1]["error"].startswith("TickInterrupted")
    if fault.startswith("moved:"):  # killed between the commit and Redis: in both tiers for now
        stranded = int(label.split(":")[1])
        assert layers(tenant)[stranded] == "warm" and stranded in hot_store().episode_ids(tenant.id.hex)

    run = tick_run(tenant=tenant, now=NOW)
    assert run.status == "succeeded", run.errors
    assert layers(tenant) == expected
    assert (
        dict(Episode.objects.across_tenants("test").filter(tenant=tenant).values_list("pk", "turn_count"))
        == turns_before
    )
    assert Turn.objects.across_tenants("test").filter(tenant=tenant).count() == sum(turns_before.values())
    assert_consistent(tenant)
    # Each episode was moved once per transition, never twice.
    for action in ("hot_to_warm", "warm_to_cold"):
        moved = list(
            JournalEntry.objects.across_tenants("test")
            .filter(tenant=tenant, action=action)
            .values_list("episode_id", flat=True)
        )
        assert len(moved) == len(set(moved))


def test_a_tick_killed_before_redis_heals_within_a_minute(provided, ages):
    """The every-minute repair task (not only the next tick) takes the documents of the episodes a
    killed tick packed out of Redis, where hot-only searches found them; another tenant's hot
    documents stay."""
    from episodes.tasks import repair_hot_index

    tenant = provided.tenant
    other = Caller("outsider-co", embedder="provided").tenant
    theirs = conversation(other, session="o", idle_days=200, topic=2, seed=50)
    their_documents = hot_store().count(other.id.hex)
    first_move = min(pk for pk, layer in expected_layers(tenant, NOW).items() if layer != "hot")

    def hook(seen):
        if seen == f"moved:{first_move}":  # every move of the step has committed, none left Redis
            raise TickInterrupted(f"killed at {seen}")

    with pytest.raises(TickInterrupted):
        tick_run(tenant=tenant, now=NOW, hook=hook)
    stranded = set(
        Episode.objects.across_tenants("test")
        .filter(tenant=tenant, layer=Layer.WARM)
        .values_list("pk", flat=True)
    )
    assert stranded and stranded <= hot_store().episode_ids(tenant.id.hex)
    query = {"vector": vectors_near(50, 5)[0].tolist(), "layers": ["hot"], "view": "full", "limit": 20}
    found = provided.post("/api/v1/search", query).json()["results"]
    assert "warm" in {hit["layer"] for hit in found}  # packed, and found in the hot tier

    assert repair_hot_index() == len(stranded)
    assert_consistent(tenant)
    found = provided.post("/api/v1/search", query).json()["results"]
    assert found and {hit["layer"] for hit in found} == {"hot"}
    assert theirs in hot_store().episode_ids(other.id.hex)
    assert hot_store().count(other.id.hex) == their_documents
    assert repair_hot_index() == 0  # nothing left to put right


def test_redis_down_during_the_move_is_repaired_by_the_next_tick(provided, ages, monkeypatch):
    tenant = provided.tenant

    def unreachable(self, *args, **kwargs):
        raise redis.ConnectionError("redis is down")

    monkeypatch.setattr(HotStore, "remove_episode", unreachable)
    run = tick_run(tenant=tenant, now=NOW, steps=["hot_to_warm"])
    assert run.counts["hot_to_warm"] == 4
    stranded = set(
        Episode.objects.across_tenants("test")
        .filter(tenant=tenant, needs_reindex=True)
        .values_list("pk", flat=True)
    )
    assert stranded == {ages[d] for d in (20, 50, 100, 200)}
    assert stranded <= hot_store().episode_ids(tenant.id.hex)  # still in Redis, and marked
    monkeypatch.undo()

    repaired = tick_run(tenant=tenant, now=NOW)
    assert repaired.counts["redis_removed"] == 4
    assert_consistent(tenant)


def test_a_run_left_running_by_a_killed_process_is_closed_by_the_next(provided):
    """Hardening finding 10: a killed tick left its record `running` forever."""
    tenant = provided.tenant
    stuck = TickRun.objects.create(tenant=tenant, now_used=NOW, status=TickRun.Status.RUNNING)
    other = TickRun.objects.create(
        tenant=Tenant.objects.create(name="someone-else"), now_used=NOW, status=TickRun.Status.RUNNING
    )
    run = tick_run(tenant=tenant, now=NOW)
    stuck.refresh_from_db()
    assert run.status == TickRun.Status.SUCCEEDED
    assert stuck.status == TickRun.Status.FAILED and stuck.finished_at is not None
    assert "interrupted" in stuck.errors[0]["error"]
    other.refresh_from_db()
    assert other.status == TickRun.Status.RUNNING  # another tenant's run is that tenant's tick's to judge
