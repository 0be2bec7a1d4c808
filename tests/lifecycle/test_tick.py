"""The lifecycle tick: layers by policy at a controlled `now`, anchors, halt on touch, another
tenant's policy, caps, gradient, upward migration, states and candidates, purge, the lock (a tick
killed or failing halfway: test_tick_interrupted.py)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from episodes.curation import episode_forget
from episodes.models import Episode, Layer, Link, State, Turn
from episodes.stores.hot import hot_store
from lifecycle.compression import WarmShape, warm_points_for_age
from lifecycle.models import AccessWindow, Candidate, JournalEntry, TickRun, policy_row
from lifecycle.tasks import schedule_ticks, tick_tenant
from lifecycle.tick import tick_run
from retrieval.services import record_access
from tests.conftest import Caller

from .factories import (
    IDLE_DAYS,
    LONG,
    NOW,
    assert_consistent,
    conversation,
    expected_layers,
    layers,
    memory,
    set_policy,
    strict_thresholds,
    vectors_near,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_tick_at_a_controlled_now_moves_exactly_what_the_policy_says(provided, ages, capsys):
    tenant = provided.tenant
    expected = expected_layers(tenant, NOW)
    hot_entities = dict(
        Episode.objects.across_tenants("test").filter(tenant=tenant).values_list("pk", "entities")
    )
    assert [expected[ages[d]] for d in IDLE_DAYS] == ["hot", "hot", "warm", "warm", "cold", "cold"]
    assert expected[ages["anchor"]] == "hot"

    call_command("tick", "--tenant", tenant.name, "--now", NOW.isoformat())

    assert layers(tenant) == expected
    out = capsys.readouterr().out
    assert "hot_to_warm 4" in out and "warm_to_cold 2" in out
    run = TickRun.objects.across_tenants("test").get(tenant=tenant)
    assert run.status == "succeeded" and run.now_used == NOW and run.duration_ms is not None
    assert run.counts["hot_to_warm"] == 4 and run.counts["warm_to_cold"] == 2
    assert_consistent(tenant)

    for days in (20, 50, 100, 200):
        episode = Episode.objects.across_tenants("test").get(pk=ages[days])
        assert episode.summary and episode.key_points is not None and episode.packed_chars > 0
        assert 0 < episode.packed_chars < episode.raw_chars
        shape = WarmShape(episode.summary, episode.key_points, episode.entities, episode.decisions)
        if episode.layer == Layer.WARM:
            assert episode.search_text == shape.text()  # Postgres full text searches the packed shape
            policy = policy_row(tenant)
            assert len(episode.key_points) <= warm_points_for_age(days, policy)
        else:
            assert episode.headline and episode.keywords
            # full text searches the cold shape plus the entity list every layer keeps
            assert episode.search_text.startswith(" ".join([episode.headline, *episode.keywords]))
            assert all(entity in episode.search_text for entity in episode.entities)
            assert episode.summary  # the warm copy is kept on a cold episode
        # every entity and decision of the hot episode survives in the warm copy
        assert hot_entities[episode.pk]
        for entity in hot_entities[episode.pk]:
            assert entity.lower() in shape.text().lower()
        assert (
            Turn.objects.across_tenants("test").filter(episode=episode).count() == 5
        )  # raw turns are never dropped
    # Every change is journaled with its before-state.
    entries = JournalEntry.objects.across_tenants("test").filter(tenant=tenant, tick_run=run)
    assert sorted(entries.values_list("action", flat=True)).count("hot_to_warm") == 4
    for entry in entries.filter(action="hot_to_warm"):
        assert entry.before["layer"] == "hot" and entry.before["search_text"]


def test_a_second_tick_at_the_same_now_changes_nothing(provided, ages):
    tenant = provided.tenant
    tick_run(tenant=tenant, now=NOW)
    versions = dict(Episode.objects.across_tenants("test").filter(tenant=tenant).values_list("pk", "version"))
    journal = JournalEntry.objects.across_tenants("test").filter(tenant=tenant).count()
    again = tick_run(tenant=tenant, now=NOW)
    assert again.status == "succeeded"
    assert not {k for k in again.counts if k not in ("scored",)}
    assert (
        dict(Episode.objects.across_tenants("test").filter(tenant=tenant).values_list("pk", "version"))
        == versions
    )
    assert JournalEntry.objects.across_tenants("test").filter(tenant=tenant).count() == journal


def test_anchors_never_go_cold(provided):
    tenant = provided.tenant
    hot_anchor = memory(tenant, text="The user is allergic to peanuts.", idle_days=1000, anchor=True, seed=1)
    warm_anchor = memory(
        tenant, text="Standing instruction: never book red-eye flights.", idle_days=1000, anchor=True, seed=2
    )
    Episode.objects.across_tenants("test").filter(pk=warm_anchor).update(
        layer=Layer.WARM, summary="never book red-eye flights"
    )
    hot_store().remove_episode(
        tenant.id.hex,
        warm_anchor,
        list(Turn.objects.across_tenants("test").filter(episode_id=warm_anchor).values_list("pk", flat=True)),
    )
    plain = memory(tenant, text="The user once liked jazz.", idle_days=1000, seed=3)
    for days in (0, 30, 200, 2000):
        tick_run(tenant=tenant, now=NOW + timedelta(days=days))
        assert layers(tenant)[hot_anchor] == "hot"
        assert layers(tenant)[warm_anchor] == "warm"
    assert layers(tenant)[plain] == "cold"
    assert (
        Episode.objects.across_tenants("test").get(pk=hot_anchor).state == State.ACTIVE
    )  # anchors never decay
    assert (
        not JournalEntry.objects.across_tenants("test")
        .filter(episode_id__in=[hot_anchor, warm_anchor])
        .exclude(action="state")
        .exists()
    )


def test_an_episode_touched_during_its_migration_stays_where_it_was(provided):
    tenant = provided.tenant
    touched = conversation(tenant, session="a", idle_days=30, topic=0, seed=1)
    other = conversation(tenant, session="b", idle_days=30, topic=1, seed=2)

    def hook(label):
        if label == f"compressed:{touched}":  # compressed, not yet written: a search uses it now
            record_access(tenant=tenant, episode_ids=[touched], now=NOW)

    run = tick_run(tenant=tenant, now=NOW, hook=hook, steps=["hot_to_warm"])
    assert run.counts["abandoned"] == 1 and run.counts["hot_to_warm"] == 1
    episode = Episode.objects.across_tenants("test").get(pk=touched)
    assert episode.layer == Layer.HOT and episode.summary == "" and episode.access_count == 1
    assert not JournalEntry.objects.across_tenants("test").filter(episode_id=touched).exists()
    assert layers(tenant)[other] == Layer.WARM
    assert_consistent(tenant)
    # Used now, it is no longer idle: the next tick leaves it hot.
    tick_run(tenant=tenant, now=NOW + timedelta(hours=1))
    assert layers(tenant)[touched] == Layer.HOT


def test_another_tenants_policy_changes_nothing_of_ours(provided):
    outsider = Caller("outsider-co", embedder="provided").tenant
    set_policy(outsider, hot_days=1, cold_days=2)
    ours = [conversation(provided.tenant, session=f"s{i}", idle_days=5, topic=i, seed=i) for i in range(2)]
    theirs = [conversation(outsider, session=f"s{i}", idle_days=5, topic=i, seed=50 + i) for i in range(2)]
    fields = (
        "pk",
        "layer",
        "state",
        "version",
        "summary",
        "search_text",
        "last_accessed_at",
        "needs_reindex",
    )
    before = list(Episode.objects.across_tenants("test").filter(pk__in=ours).values(*fields))

    tick_run(tenant=outsider, now=NOW)
    assert {layers(outsider)[pk] for pk in theirs} == {"cold"}
    assert list(Episode.objects.across_tenants("test").filter(pk__in=ours).values(*fields)) == before
    assert not JournalEntry.objects.across_tenants("test").filter(tenant=provided.tenant).exists()

    tick_run(tenant=provided.tenant, now=NOW)
    assert {layers(provided.tenant)[pk] for pk in ours} == {"hot"}  # our hot_days is still 14
    assert_consistent(provided.tenant)
    assert_consistent(outsider)


def test_the_session_cap_and_the_hot_quota_demote_the_least_active_first(provided):
    tenant = provided.tenant
    set_policy(tenant, hot_cap_per_session=2, hot_quota=3)
    same_session = []
    for i, uses in enumerate([5, 0, 3, 1]):
        pk = memory(tenant, text=f"note {i} about the Apollo migration", idle_days=2, seed=20 + i)
        Episode.objects.across_tenants("test").filter(pk=pk).update(session_id="busy", access_count=uses)
        same_session.append(pk)
    elsewhere = [memory(tenant, text=f"other note {i}", idle_days=3 + i, seed=30 + i) for i in range(2)]

    run = tick_run(tenant=tenant, now=NOW, steps=["hot_to_warm"])
    now_layers = layers(tenant)
    # session cap: the two least used of the session leave; quota 3: of the 4 left, the weakest goes
    assert [now_layers[pk] for pk in same_session] == ["hot", "warm", "hot", "warm"]
    assert [now_layers[pk] for pk in elsewhere] == ["hot", "warm"]
    reasons = dict(
        JournalEntry.objects.across_tenants("test")
        .filter(tick_run=run)
        .values_list("episode_id", "after__reason")
    )
    assert reasons == {
        same_session[1]: "session_cap",
        same_session[3]: "session_cap",
        elsewhere[1]: "hot_quota",
    }
    assert_consistent(tenant)


def test_warm_compression_deepens_with_age(provided):
    tenant = provided.tenant
    set_policy(tenant, warm_target_ratio=0.9)  # room for many key points
    policy = policy_row(tenant)
    pk = conversation(tenant, session="g", idle_days=15, seed=3, texts=LONG)
    tick_run(tenant=tenant, now=NOW)
    first = Episode.objects.across_tenants("test").get(pk=pk)
    assert first.layer == Layer.WARM and len(first.key_points) >= 3
    later = NOW + timedelta(days=45)  # idle 60 days: fewer points
    keep = warm_points_for_age(60, policy)
    run = tick_run(tenant=tenant, now=later)
    trimmed = Episode.objects.across_tenants("test").get(pk=pk)
    assert trimmed.layer == Layer.WARM
    assert trimmed.key_points == first.key_points[:keep] and len(trimmed.key_points) < len(first.key_points)
    assert trimmed.packed_chars < first.packed_chars
    entry = JournalEntry.objects.across_tenants("test").get(tick_run=run, action="warm_gradient")
    assert entry.before["key_points"] == first.key_points


def test_repeated_use_brings_a_packed_episode_back_to_hot(provided):
    tenant = provided.tenant
    pk = conversation(tenant, session="p", idle_days=100, topic=2, seed=4)
    tick_run(tenant=tenant, now=NOW)
    packed = Episode.objects.across_tenants("test").get(pk=pk)
    assert packed.layer == Layer.COLD

    for hours in (1, 2):
        record_access(tenant=tenant, episode_ids=[pk], now=NOW + timedelta(hours=hours))
    tick_run(tenant=tenant, now=NOW + timedelta(hours=3))
    assert layers(tenant)[pk] == Layer.COLD  # two uses: not yet (promote_after_accesses = 3)

    record_access(tenant=tenant, episode_ids=[pk], now=NOW + timedelta(days=2))
    later = NOW + timedelta(days=2, hours=1)
    run = tick_run(tenant=tenant, now=later)
    restored = Episode.objects.across_tenants("test").get(pk=pk)
    assert restored.layer == Layer.HOT and restored.restored_at == later
    assert restored.summary == packed.summary and restored.headline == packed.headline  # packed copy kept
    assert run.counts["cold_to_hot"] == 1
    entry = JournalEntry.objects.across_tenants("test").get(tick_run=run, action="promote")
    assert entry.before["layer"] == "cold" and entry.after["accesses"] == 3
    assert_consistent(tenant)


def test_uses_spread_over_more_than_hot_days_do_not_promote(provided):
    tenant = provided.tenant
    pk = conversation(tenant, session="q", idle_days=30, topic=0, seed=5)
    tick_run(tenant=tenant, now=NOW)
    for week in range(1, 6):  # one use every ten days
        when = NOW + timedelta(days=10 * week)
        record_access(tenant=tenant, episode_ids=[pk], now=when)
        tick_run(tenant=tenant, now=when + timedelta(hours=1))
        assert layers(tenant)[pk] != Layer.HOT


def test_use_windows_slide_start_and_wait_as_the_promote_step_keeps_them(provided):
    """The promote step's bookkeeping, decided on the tick's listing: an unused packed episode's
    window slides to the tick's now once a day old, not before; a used one keeps its start; a newly
    packed episode gets a window from its count; a forgotten one's window waits; another tenant's
    windows are not touched."""
    tenant, outsider = provided.tenant, Caller("tick-outsider", embedder="provided").tenant
    idle, used, gone = (
        conversation(tenant, session=s, idle_days=100, topic=k, seed=20 + k) for k, s in enumerate("igf")
    )
    theirs = conversation(outsider, session="o", idle_days=100, topic=3, seed=30)
    for t in (tenant, outsider):
        tick_run(tenant=t, now=NOW)

    def windows(t):
        return {
            w.episode_id: (w.started_at, w.access_count_at_start)
            for w in AccessWindow.objects.for_tenant(t).all()
        }

    assert set(windows(tenant)) == {idle, used, gone} and windows(tenant)[idle] == (NOW, 0)
    record_access(tenant=tenant, episode_ids=[used], now=NOW + timedelta(hours=2))
    fresh = conversation(tenant, session="n", idle_days=100, topic=4, seed=25)
    tick_run(tenant=tenant, now=NOW + timedelta(hours=12))  # under a day: nothing slides
    assert windows(tenant)[idle] == (NOW, 0) and windows(tenant)[used] == (NOW, 0)
    assert windows(tenant)[fresh] == (NOW + timedelta(hours=12), 0)  # newly packed: from its count

    episode_forget(tenant=tenant, episode_id=gone, now=NOW + timedelta(hours=13))
    later = NOW + timedelta(days=2)
    tick_run(tenant=tenant, now=later)
    after = windows(tenant)
    assert after[idle] == (later, 0)  # slid: no use since it began
    assert after[used] == (NOW, 0)  # used once within hot_days: its window keeps its start
    assert after[gone] == (NOW, 0)  # forgotten: waits
    assert after[fresh] == (later, 0)
    assert all(layer != Layer.HOT for layer in layers(tenant).values())  # no window was due a promotion
    assert windows(outsider) == {theirs: (NOW, 0)}
    assert layers(tenant)[used] == Layer.COLD  # one use is not three


def test_states_and_candidates_are_marked_never_applied(provided):
    tenant = provided.tenant
    strict_thresholds(tenant)
    old = memory(tenant, text="A passing remark about the weather in Oslo.", idle_days=300, seed=6)
    near = unit_vectors_pair()
    a = memory(tenant, text="Meeting notes: the budget review moved to Friday.", idle_days=40, vector=near[0])
    b = memory(
        tenant, text="Notes from the meeting: budget review is now on Friday.", idle_days=41, vector=near[1]
    )

    run = tick_run(tenant=tenant, now=NOW)
    assert Episode.objects.across_tenants("test").get(pk=old).state == State.DELETE_CANDIDATE
    delete = Candidate.objects.across_tenants("test").get(tenant=tenant, kind="delete")
    assert delete.episode_id == old and delete.status == "proposed"
    merge = Candidate.objects.across_tenants("test").get(tenant=tenant, kind="merge")
    assert {merge.episode_id, merge.other_id} == {a, b} and merge.similarity >= 0.92
    # Only marked: nothing is forgotten, merged or linked by a tick.
    assert not Episode.objects.across_tenants("test").filter(tenant=tenant, state=State.FORGOTTEN).exists()
    assert not Link.objects.across_tenants("test").filter(tenant=tenant, kind="merged_into").exists()
    assert (
        JournalEntry.objects.across_tenants("test").filter(tick_run=run, action="propose_merge").count() == 1
    )
    # Idempotent: no second proposal.
    tick_run(tenant=tenant, now=NOW + timedelta(hours=1))
    assert Candidate.objects.across_tenants("test").filter(tenant=tenant).count() == 2

    # Used again, it is no longer a delete candidate and its proposal is withdrawn.
    record_access(tenant=tenant, episode_ids=[old], now=NOW + timedelta(hours=2))
    tick_run(tenant=tenant, now=NOW + timedelta(hours=3))
    assert Episode.objects.across_tenants("test").get(pk=old).state == State.DORMANT
    assert Candidate.objects.across_tenants("test").get(pk=delete.pk).status == "rejected"


def unit_vectors_pair():

    return vectors_near(77, 2, spread=0.05)


def test_a_dormant_hot_episode_is_tagged_in_redis(provided):
    tenant = provided.tenant
    strict_thresholds(tenant)
    pk = memory(tenant, text="An unlinked remark nobody used.", idle_days=5, seed=8)
    tick_run(tenant=tenant, now=NOW)
    assert Episode.objects.across_tenants("test").get(pk=pk).state == State.DORMANT
    from episodes.scope import Scope

    assert hot_store().episode_ids(tenant.id.hex, Scope(states=("active",))) == set()
    assert hot_store().episode_ids(tenant.id.hex) == {pk}


def test_forgotten_episodes_are_purged_only_after_the_grace_period(provided):
    tenant = provided.tenant
    grace = policy_row(tenant).purge_grace_days
    due = memory(tenant, text="forget me long ago", idle_days=60, seed=9)
    recent = memory(tenant, text="forget me lately", idle_days=60, seed=10)
    episode_forget(tenant=tenant, episode_id=due, now=NOW - timedelta(days=grace + 1))
    episode_forget(tenant=tenant, episode_id=recent, now=NOW - timedelta(days=grace - 1))

    run = tick_run(tenant=tenant, now=NOW)
    assert run.counts["purged"] == 1
    assert (
        not Episode.objects.across_tenants("test").filter(pk=due).exists()
        and not Turn.objects.across_tenants("test").filter(episode_id=due).exists()
    )
    assert Episode.objects.across_tenants("test").get(pk=recent).state == State.FORGOTTEN
    note = JournalEntry.objects.across_tenants("test").get(action="purge")
    assert note.episode_id is None and note.episode_id_value == due
    # its shape only: nothing it said, nor whose it was
    assert set(note.before) == {"kind", "layer", "turn_count", "forgotten_at"}


def test_one_tick_per_tenant_at_a_time(provided, ages):
    tenant = provided.tenant
    inner: list[TickRun] = []

    def run_concurrently(label):
        if label == "after:repair" and not inner:

            def other():
                try:
                    inner.append(tick_run(tenant=tenant, now=NOW))
                finally:
                    connection.close()

            thread = threading.Thread(target=other)
            thread.start()
            thread.join()

    outer = tick_run(tenant=tenant, now=NOW, hook=run_concurrently)
    assert inner[0].status == "skipped" and outer.status == "succeeded"
    assert layers(tenant) == expected_layers(tenant, NOW)


def test_the_task_and_the_schedules(provided, ages):
    from django_q.models import Schedule

    result = tick_tenant(str(provided.tenant.pk))
    assert result["status"] == "succeeded"
    before = timezone.now()
    assert schedule_ticks()["created"] >= 1
    schedule = Schedule.objects.get(name=f"lifecycle.tick:{provided.tenant.pk}")
    assert schedule.func == "lifecycle.tasks.tick_tenant" and schedule.minutes == 60
    # Its first tick one interval on, as every later one: not at once.
    assert before + timedelta(minutes=60) <= schedule.next_run <= timezone.now() + timedelta(minutes=60)
    set_policy(provided.tenant, tick_interval_minutes=360)
    assert schedule_ticks()["updated"] == 1
    assert Schedule.objects.get(pk=schedule.pk).minutes == 360
    assert schedule_ticks() == {"created": 0, "updated": 0, "removed": 0}


def test_a_tick_leaves_no_removed_hot_documents_in_bm25s_statistics(provided, ages):
    from episodes.stores.bm25_probe import BALLAST
    from memory_platform.redis_client import info_field

    store = hot_store()
    index = store.index_name(provided.tenant.id.hex)
    # Two more conversations as idle as the oldest: more documents leave hot than half the
    # ballast, past which RediSearch collects when asked (fewer stay, counted within it).
    for i in range(2):
        conversation(provided.tenant, session=f"more{i}", idle_days=max(IDLE_DAYS), topic=i, seed=70 + i)

    def records() -> int:
        return int(info_field(store.client.execute_command("FT.INFO", index), "num_records"))

    before = records()
    run = tick_run(tenant=provided.tenant, now=NOW, steps=["hot_to_warm"])
    assert run.counts["hot_to_warm"] == 6
    assert BALLAST // 2 < 6 * 6  # each episode: five turns and its own document
    after = records()
    assert after < before
    store.collect_garbage(provided.tenant.id.hex)
    assert records() == after  # the tick collected: nothing was left


def test_packing_leaves_nothing_pending_in_the_full_text_indexes_search_reads(provided, ages):
    # A GIN pending list is read in full by every search until it is merged (migration 0010).
    run = tick_run(tenant=provided.tenant, now=NOW, steps=["hot_to_warm"])
    assert run.counts["hot_to_warm"] == 4
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM episodes_turn WHERE tenant_id = %s AND packed", [provided.tenant.id]
        )
        assert cursor.fetchone()[0] > 0
        for index in ("turn_packed_window_vector", "episode_packed_search_vector"):
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [index])
            assert cursor.fetchone()[0] == 0, index  # pages merged now: none were pending
