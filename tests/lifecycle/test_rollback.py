"""Rollback from the journal puts the exact prior state back: fields, links, candidates, Redis."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from episodes.models import Episode, Layer, Link, State
from episodes.stores.hot import hot_store
from lifecycle.candidates import CandidateError, candidate_approve, candidate_reject
from lifecycle.models import Candidate, JournalEntry
from lifecycle.rollback import RollbackError, rollback_journal_entry
from lifecycle.tick import tick_run
from lifecycle.unpack import unpack

from .factories import (
    NOW,
    assert_consistent,
    conversation,
    memory,
    merge_proposal,
    strict_thresholds,
)

pytestmark = pytest.mark.django_db(transaction=True)

# What a rollback restores: everything but the version (which moves on) and the generated tsvector.
COMPARED = [f.name for f in Episode._meta.concrete_fields if f.name not in ("version", "search_vector")]


def state(pk: int) -> dict:
    row = Episode.objects.across_tenants("test").filter(pk=pk).values(*COMPARED).get()
    row["embedding"] = [round(float(x), 6) for x in row["embedding"]]
    return row


def test_rolling_back_a_move_restores_the_exact_prior_state(provided):
    tenant = provided.tenant
    strict_thresholds(tenant)
    pk = conversation(tenant, session="r", idle_days=100, topic=0, seed=1)
    linked = conversation(tenant, session="r2", idle_days=2, topic=1, seed=2)
    Link.objects.create(tenant=tenant, src_id=linked, dst_id=pk, kind="references")
    before = state(pk)
    links = list(
        Link.objects.across_tenants("test").filter(tenant=tenant).values_list("src_id", "dst_id", "kind")
    )

    tick_run(tenant=tenant, now=NOW)
    assert Episode.objects.across_tenants("test").get(pk=pk).layer == Layer.COLD
    assert pk not in hot_store().episode_ids(tenant.id.hex)
    to_warm = JournalEntry.objects.across_tenants("test").get(episode_id=pk, action="hot_to_warm")
    to_cold = JournalEntry.objects.across_tenants("test").get(episode_id=pk, action="warm_to_cold")

    # Rolling back the move to warm first undoes what came later: the move to cold, the new state.
    later = list(
        JournalEntry.objects.across_tenants("test").filter(episode_id=pk, pk__gte=to_warm.pk).order_by("-pk")
    )
    assert {e.action for e in later} == {"hot_to_warm", "warm_to_cold", "state"}
    undone = rollback_journal_entry(to_warm, now=NOW + timedelta(hours=1), actor="test")
    assert undone == later
    assert state(pk) == before
    assert (
        list(
            Link.objects.across_tenants("test").filter(tenant=tenant).values_list("src_id", "dst_id", "kind")
        )
        == links
    )
    assert pk in hot_store().episode_ids(tenant.id.hex)
    assert_consistent(tenant)
    for entry in (to_warm, to_cold):
        entry.refresh_from_db()
        assert entry.rolled_back_at == NOW + timedelta(hours=1)
    assert JournalEntry.objects.across_tenants("test").get(episode_id=pk, action="rollback").after[
        "entries"
    ] == [e.pk for e in later]
    with pytest.raises(RollbackError, match="already"):
        rollback_journal_entry(to_cold, now=NOW, actor="test")


def test_rolling_back_only_the_latest_step(provided):
    tenant = provided.tenant
    pk = conversation(tenant, session="r", idle_days=100, topic=2, seed=3)
    tick_run(tenant=tenant, now=NOW, steps=["hot_to_warm"])
    warm = state(pk)
    tick_run(tenant=tenant, now=NOW)
    rollback_journal_entry(
        JournalEntry.objects.across_tenants("test").get(episode_id=pk, action="warm_to_cold"), now=NOW
    )
    assert state(pk) == warm
    assert_consistent(tenant)


def test_rolling_back_an_unpack_packs_it_again(provided):
    tenant = provided.tenant
    pk = conversation(tenant, session="u", idle_days=30, topic=1, seed=4)
    tick_run(tenant=tenant, now=NOW)
    packed = state(pk)
    unpack(tenant=tenant, episode_id=pk, now=NOW + timedelta(hours=1))
    assert Episode.objects.across_tenants("test").get(pk=pk).layer == Layer.HOT
    entry = JournalEntry.objects.across_tenants("test").get(episode_id=pk, action="unpack")
    rollback_journal_entry(entry, now=NOW + timedelta(hours=2))
    after = state(pk)
    # The unpack's own use of the episode (an access) stays; the layer and its shape go back.
    for name in ("layer", "summary", "key_points", "search_text", "packed_chars", "entities", "decisions"):
        assert after[name] == packed[name], name
    assert_consistent(tenant)


def test_an_approved_merge_is_soft_and_rolls_back_with_its_link(provided):
    tenant = provided.tenant
    candidate = merge_proposal(tenant)
    merged, survivor = candidate.episode_id, candidate.other_id
    before = state(merged)

    candidate_approve(candidate=candidate, now=NOW + timedelta(hours=1), actor="admin:op")
    assert Candidate.objects.across_tenants("test").get(pk=candidate.pk).status == "applied"
    assert Episode.objects.across_tenants("test").get(pk=merged).state == State.FORGOTTEN
    assert Episode.objects.across_tenants("test").get(pk=survivor).state != State.FORGOTTEN
    assert (
        Link.objects.across_tenants("test")
        .filter(src_id=merged, dst_id=survivor, kind="merged_into")
        .exists()
    )
    assert hot_store().episode_ids(tenant.id.hex) == {survivor}
    with pytest.raises(CandidateError):
        candidate_approve(candidate=candidate, now=NOW, actor="admin:op")

    entry = JournalEntry.objects.across_tenants("test").get(episode_id=merged, action="merge")
    rollback_journal_entry(entry, now=NOW + timedelta(hours=2), actor="admin:op")
    assert state(merged) == before
    assert not Link.objects.across_tenants("test").filter(kind="merged_into").exists()
    assert Candidate.objects.across_tenants("test").get(pk=candidate.pk).status == "proposed"
    assert hot_store().episode_ids(tenant.id.hex) == {merged, survivor}
    assert_consistent(tenant)


def test_delete_candidates_approve_reject_and_roll_back(provided):
    tenant = provided.tenant
    old = memory(tenant, text="A passing remark about rain in Oslo.", idle_days=300, seed=6)
    other = memory(tenant, text="A passing remark about snow in Bergen.", idle_days=300, seed=7)
    tick_run(tenant=tenant, now=NOW)
    first, second = (
        Candidate.objects.across_tenants("test").filter(tenant=tenant, kind="delete").order_by("episode_id")
    )
    assert (first.episode_id, second.episode_id) == (old, other)

    candidate_reject(candidate=second, now=NOW, actor="admin:op")
    assert Candidate.objects.across_tenants("test").get(pk=second.pk).status == "rejected"
    assert (
        Episode.objects.across_tenants("test").get(pk=other).state == State.DELETE_CANDIDATE
    )  # rejecting deletes nothing

    candidate_approve(candidate=first, now=NOW, actor="admin:op")
    forgotten = Episode.objects.across_tenants("test").get(pk=old)
    assert forgotten.state == State.FORGOTTEN and forgotten.state_before_forget == State.DELETE_CANDIDATE
    rollback_journal_entry(
        JournalEntry.objects.across_tenants("test").get(episode_id=old, action="delete"), now=NOW
    )
    restored = Episode.objects.across_tenants("test").get(pk=old)
    assert restored.state == State.DELETE_CANDIDATE and restored.forgotten_at is None
    assert restored.state_before_forget == ""

    # Undoing the tick's state change also withdraws the proposal it made.
    rollback_journal_entry(
        JournalEntry.objects.across_tenants("test").get(episode_id=old, action="state"), now=NOW
    )
    assert Episode.objects.across_tenants("test").get(pk=old).state == State.ACTIVE
    assert not Candidate.objects.across_tenants("test").filter(pk=first.pk).exists()


def test_a_purge_cannot_be_rolled_back(provided):
    tenant = provided.tenant
    pk = memory(tenant, text="temporary note", idle_days=1, seed=8)
    from lifecycle.forgetting import forget_journaled

    forget_journaled(tenant=tenant, episode_id=pk, now=NOW - timedelta(days=40), actor="api")
    forget_entry = JournalEntry.objects.across_tenants("test").get(episode_id=pk, action="forget")
    tick_run(tenant=tenant, now=NOW)
    purge = JournalEntry.objects.across_tenants("test").get(episode_id_value=pk, action="purge")
    with pytest.raises(RollbackError, match="cannot be rolled back"):
        rollback_journal_entry(purge, now=NOW)
    with pytest.raises(RollbackError, match="no longer exists"):
        rollback_journal_entry(forget_entry, now=NOW)


def test_admin_rolls_back_and_decides(client, provided):
    user = get_user_model().objects.create_superuser("op", "op@example.com", "pw-12345678")
    client.force_login(user)
    tenant = provided.tenant
    pk = conversation(tenant, session="a", idle_days=30, topic=0, seed=9)
    old = memory(tenant, text="A passing remark about fog in Porto.", idle_days=300, seed=10)
    tick_run(tenant=tenant, now=NOW)
    assert client.get("/admin/lifecycle/journalentry/").status_code == 200
    assert client.get("/admin/lifecycle/candidate/").status_code == 200

    entry = JournalEntry.objects.across_tenants("test").get(episode_id=pk, action="hot_to_warm")
    chosen = {"action": "roll_back", "_selected_action": [entry.pk]}
    # first a page saying what will change, and nothing changed yet
    confirmation = client.post("/admin/lifecycle/journalentry/", chosen).content.decode()
    assert (
        f'data-entry="{entry.pk}"' in confirmation
        and "hot_to_warm" in confirmation
        and "Yes, roll back" in confirmation
    )
    assert Episode.objects.across_tenants("test").get(pk=pk).layer == Layer.WARM
    response = client.post("/admin/lifecycle/journalentry/", {**chosen, "confirmed": "yes"}, follow=True)
    assert response.status_code == 200
    assert Episode.objects.across_tenants("test").get(pk=pk).layer == Layer.HOT
    assert (
        JournalEntry.objects.across_tenants("test").get(episode_id=pk, action="rollback").actor == "admin:op"
    )

    candidate = Candidate.objects.across_tenants("test").get(episode_id=old, kind="delete")
    client.post("/admin/lifecycle/candidate/", {"action": "approve", "_selected_action": [candidate.pk]})
    assert Episode.objects.across_tenants("test").get(pk=old).state == State.FORGOTTEN
    assert Candidate.objects.across_tenants("test").get(pk=candidate.pk).decided_by == "admin:op"
