"""Every destructive path leaves a journal entry that rolls it back exactly, until the purge (issue
19, item 4): the API's delete and forget by filter, the console's forget, edit and restore, the
API's restore, approved delete and merge candidates. Each test takes a picture of the episode (its
whole row but the version, its links, its documents in Redis), acts, finds the entry and who it
names, rolls it back and compares. The purge is the one step nothing undoes, and it is logged."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.utils import timezone

from episodes.models import Episode, Layer, Link, State, Turn
from episodes.stores.hot import hot_store
from lifecycle.journal import EDITABLE_FIELDS
from lifecycle.models import Candidate, JournalEntry, policy_row
from lifecycle.rollback import RollbackError, rollback_journal_entry
from lifecycle.services import episode_edit, forget_journaled, purge_forgotten
from lifecycle.tick import tick_run
from tests.conftest import pk

from .factories import (
    NOW,
    assert_consistent,
    conversation,
    memory,
    merge_proposal,
)

pytestmark = pytest.mark.django_db(transaction=True)

#: Everything a rollback must put back: every column but the version, which moves on.
COMPARED = [f.name for f in Episode._meta.concrete_fields if f.name != "version"]


def picture(episode_id: int) -> dict[str, Any]:
    row = Episode.objects.across_tenants("test").filter(pk=episode_id).values(*COMPARED).get()
    if row["embedding"] is not None:
        row["embedding"] = [round(float(x), 6) for x in row["embedding"]]
    links = Link.objects.across_tenants("test").filter(Q(src_id=episode_id) | Q(dst_id=episode_id))
    tenant_hex = row["tenant"].hex
    store = hot_store()
    return {
        "row": row,
        "links": sorted(links.values_list("src_id", "dst_id", "kind", "created_at")),
        "in_redis": episode_id in store.episode_ids(tenant_hex),
        "turn_documents": store.count(tenant_hex),
    }


def remember(caller, text: str, **extra: Any) -> str:
    response = caller.post("/api/v1/memories", {"text": text, **extra})
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def found(caller, query: str, **extra: Any) -> list[str]:
    response = caller.post("/api/v1/search", {"query": query, **extra})
    assert response.status_code == 200, response.json()
    return [hit["episode_id"] for hit in response.json()["results"]]


def journaled(episode_id: int, action: str) -> JournalEntry:
    return JournalEntry.objects.across_tenants("test").get(
        episode_id=episode_id, action=action, rolled_back_at__isnull=True
    )


def roll_back(entry: JournalEntry) -> None:
    rollback_journal_entry(entry, now=timezone.now(), actor="test")


def act_in_console(admin_client, action: str, episode_ids: list[int]) -> None:
    response = admin_client.post(
        "/admin/episodes/episode/", {"action": action, "_selected_action": episode_ids}
    )
    assert response.status_code == 302


def change_form(page) -> dict[str, Any]:
    """The episode's change form as the page shows it: what a browser posts back unchanged."""
    data: dict[str, Any] = {}
    forms = [page.context["adminform"].form]
    for inline in page.context["inline_admin_formsets"]:
        forms += [inline.formset.management_form, *inline.formset.forms]
    for form in forms:
        for name in form.fields:
            value = form[name].value()
            if value is not None:
                data[form.add_prefix(name)] = value
    return data


# --- the API ---------------------------------------------------------------------------------------
def test_api_delete_is_journaled_and_rolls_back(caller, outsider):
    public_id = remember(caller, "Ana is allergic to peanuts.", tags=["health"])
    episode_id = pk(public_id)
    before = picture(episode_id)
    assert before["in_redis"] and public_id in found(caller, "peanuts allergy")

    # Another tenant's key finds nothing to delete, and nothing changes.
    assert outsider.delete(f"/api/v1/memories/{public_id}").status_code == 404
    assert picture(episode_id) == before
    assert not JournalEntry.objects.across_tenants("test").filter(episode_id=episode_id).exists()

    response = caller.delete(f"/api/v1/memories/{public_id}")
    assert response.status_code == 200
    body = response.json()
    assert (body["id"], body["state"]) == (public_id, "forgotten") and body["forgotten_at"]
    assert not picture(episode_id)["in_redis"] and public_id not in found(caller, "peanuts allergy")
    entry = journaled(episode_id, "forget")
    assert entry.actor == f"api:{caller.key.prefix}"
    assert caller.delete(f"/api/v1/memories/{public_id}").status_code == 404  # once

    roll_back(entry)
    assert picture(episode_id) == before
    assert public_id in found(caller, "peanuts allergy")


def test_an_api_link_removal_is_journaled_and_rolls_back(caller, outsider):
    a, b = remember(caller, "The offsite is in Lisbon."), remember(caller, "Flights to Lisbon are booked.")
    for kind in ("related", "references"):
        made = caller.post(f"/api/v1/memories/{a}/links", {"target_id": b, "kind": kind})
        assert made.status_code == 201, made.json()
    before = picture(pk(a))
    assert len(before["links"]) == 2

    assert outsider.delete(f"/api/v1/memories/{a}/links", {"target_id": b}).status_code == 404
    response = caller.delete(f"/api/v1/memories/{a}/links", {"target_id": b})
    assert response.status_code == 200 and response.json() == {"deleted": 2}
    assert picture(pk(a))["links"] == []
    entry = journaled(pk(a), "unlink")
    assert entry.actor == f"api:{caller.key.prefix}"

    roll_back(entry)
    assert picture(pk(a))["links"] == before["links"]


def test_forget_by_filter_is_journaled_per_episode_and_rolls_back(caller, outsider):
    tea = remember(caller, "Alice prefers green tea.", tags=["drinks"])
    coffee = remember(caller, "Bob drinks his coffee black.", tags=["drinks"])
    flight = remember(caller, "Flight LH123 leaves at nine.")
    before = {p: picture(pk(p)) for p in (tea, coffee, flight)}

    assert outsider.post("/api/v1/forget", {"tags": ["drinks"]}).json()["count"] == 0
    assert {p: picture(pk(p)) for p in before} == before

    body = caller.post("/api/v1/forget", {"tags": ["drinks"]}).json()
    assert sorted(body["ids"]) == sorted([tea, coffee])
    assert tea not in found(caller, "green tea") and coffee not in found(caller, "coffee black")
    for public_id in (tea, coffee):
        entry = journaled(pk(public_id), "forget")
        assert entry.actor == f"api:{caller.key.prefix}"
        roll_back(entry)
    assert {p: picture(pk(p)) for p in before} == before
    assert tea in found(caller, "green tea")
    assert_consistent(caller.tenant)


def test_api_restore_is_journaled_and_its_rollback_forgets_again(caller, outsider):
    public_id = remember(caller, "The spare key is under the blue flower pot.")
    episode_id = pk(public_id)
    assert caller.delete(f"/api/v1/memories/{public_id}").status_code == 200
    forgotten = picture(episode_id)
    assert forgotten["row"]["state"] == State.FORGOTTEN and not forgotten["in_redis"]

    assert outsider.post(f"/api/v1/memories/{public_id}/restore").status_code == 404
    assert picture(episode_id) == forgotten

    response = caller.post(f"/api/v1/memories/{public_id}/restore")
    assert response.status_code == 200 and response.json()["id"] == public_id
    assert picture(episode_id)["in_redis"] and public_id in found(caller, "spare key flower pot")
    entry = journaled(episode_id, "restore")
    assert entry.actor == f"api:{caller.key.prefix}"
    assert entry.before == {
        "state": State.FORGOTTEN,
        "state_before_forget": State.ACTIVE,
        "forgotten_at": forgotten["row"]["forgotten_at"].isoformat(),
    }

    roll_back(entry)
    assert picture(episode_id) == forgotten
    assert public_id not in found(caller, "spare key flower pot")
    # The forget itself still rolls back, and the memory is searchable again.
    roll_back(journaled(episode_id, "forget"))
    assert picture(episode_id)["row"]["state"] == State.ACTIVE
    assert public_id in found(caller, "spare key flower pot")


def test_a_restore_after_the_tenants_grace_period_is_refused_and_journals_nothing(caller):
    policy = policy_row(caller.tenant)
    policy.purge_grace_days = 2
    policy.save(update_fields=["purge_grace_days"])
    public_id = remember(caller, "The old wifi password was hunter2.")
    episode_id = pk(public_id)
    forget_journaled(
        tenant=caller.tenant, episode_id=episode_id, now=timezone.now() - timedelta(days=3), actor="test"
    )
    forgotten = picture(episode_id)

    response = caller.post(f"/api/v1/memories/{public_id}/restore")
    assert response.status_code == 409 and "grace period" in response.json()["error"]["message"]
    assert picture(episode_id) == forgotten
    assert (
        not JournalEntry.objects.across_tenants("test")
        .filter(episode_id=episode_id, action="restore")
        .exists()
    )


# --- the console -----------------------------------------------------------------------------------
def test_console_forget_is_journaled_and_rolls_back(admin_client, caller):
    public_id = remember(caller, "Lena's cello recital is on May 18.")
    episode_id = pk(public_id)
    before = picture(episode_id)

    act_in_console(admin_client, "forget", [episode_id])
    assert picture(episode_id)["row"]["state"] == State.FORGOTTEN
    assert public_id not in found(caller, "cello recital")
    entry = journaled(episode_id, "forget")
    assert entry.actor == "admin:op"

    roll_back(entry)
    assert picture(episode_id) == before
    assert public_id in found(caller, "cello recital")


def test_console_restore_is_journaled_and_its_rollback_forgets_again(admin_client, caller):
    public_id = remember(caller, "Priya owns the rollback runbook.")
    episode_id = pk(public_id)
    assert caller.delete(f"/api/v1/memories/{public_id}").status_code == 200
    forgotten = picture(episode_id)

    act_in_console(admin_client, "restore", [episode_id])
    assert picture(episode_id)["row"]["state"] == State.ACTIVE
    assert public_id in found(caller, "rollback runbook")
    entry = journaled(episode_id, "restore")
    assert entry.actor == "admin:op"

    roll_back(entry)
    assert picture(episode_id) == forgotten
    assert public_id not in found(caller, "rollback runbook")


def test_console_edit_goes_through_the_journal_and_redis_follows(admin_client, caller):
    public_id = remember(caller, "Ana is allergic to peanuts.", tags=["health"])
    episode_id = pk(public_id)
    before = picture(episode_id)
    url = f"/admin/episodes/episode/{episode_id}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200
    # What an operator may edit is the allow-list, nothing else (owner, layer, state, usage...).
    assert set(page.context["adminform"].form.fields) == EDITABLE_FIELDS

    # Saved unchanged: nothing written, nothing journaled.
    assert admin_client.post(url, change_form(page)).status_code == 302
    assert picture(episode_id) == before
    assert not JournalEntry.objects.across_tenants("test").filter(episode_id=episode_id).exists()

    assert found(caller, "peanuts", tags=["allergy"]) == []
    edited = {**change_form(page), "title": "Peanut allergy", "tags": "health,allergy"}
    assert admin_client.post(url, edited).status_code == 302
    episode = Episode.objects.across_tenants("test").get(pk=episode_id)
    assert (episode.title, episode.tags) == ("Peanut allergy", ["health", "allergy"])
    entry = journaled(episode_id, "edit")
    assert entry.actor == "admin:op"
    assert entry.before == {"title": before["row"]["title"], "tags": ["health"]}
    assert entry.after == {"title": "Peanut allergy", "tags": ["health", "allergy"]}
    # The hot documents carry the tags: Redis followed the edit.
    assert found(caller, "peanuts", tags=["allergy"]) == [public_id]

    roll_back(entry)
    assert picture(episode_id) == before
    assert found(caller, "peanuts", tags=["allergy"]) == []
    assert found(caller, "peanuts", tags=["health"]) == [public_id]
    assert_consistent(caller.tenant)


def test_an_edit_of_a_packed_shape_moves_its_search_text_and_rolls_back(provided):
    tenant = provided.tenant
    episode_id = conversation(tenant, session="w", idle_days=30, topic=1, seed=4)
    tick_run(tenant=tenant, now=NOW, steps=["hot_to_warm"])
    assert Episode.objects.across_tenants("test").get(pk=episode_id).layer == Layer.WARM
    before = picture(episode_id)

    episode = episode_edit(
        tenant=tenant,
        episode_id=episode_id,
        changes={"summary": "Zanzibar sailing plans for the autumn.", "kind": "conversation"},
        now=NOW,
        actor="admin:op",
    )
    assert "zanzibar" in episode.search_text.lower()
    assert episode.packed_chars != before["row"]["packed_chars"]
    entry = journaled(episode_id, "edit")
    assert set(entry.before) == {"summary", "search_text", "packed_chars"}  # kind did not change
    assert Episode.objects.across_tenants("test").filter(search_vector="zanzibar", pk=episode_id).exists()

    roll_back(entry)
    assert picture(episode_id) == before
    assert not Episode.objects.across_tenants("test").filter(search_vector="zanzibar").exists()


def test_an_edit_outside_the_allow_list_or_with_a_bad_value_writes_nothing(provided):
    tenant = provided.tenant
    episode_id = memory(tenant, text="Budget review moved to Friday.", idle_days=1)
    before = picture(episode_id)
    for changes in (
        {"layer": "cold"},
        {"user_id": "mallory"},
        {"access_count": 0},
        {"title": "ok", "state": "x"},
    ):
        with pytest.raises(ValueError, match="not editable"):
            episode_edit(tenant=tenant, episode_id=episode_id, changes=changes, now=NOW, actor="admin:op")
    with pytest.raises(ValidationError):
        episode_edit(tenant=tenant, episode_id=episode_id, changes={"title": "x" * 201}, now=NOW, actor="t")
    assert picture(episode_id) == before
    assert not JournalEntry.objects.across_tenants("test").filter(episode_id=episode_id).exists()


def test_turns_and_links_are_not_changed_by_hand_in_the_console(admin_client, caller):
    a = remember(caller, "Project Apollo kickoff is on March 3.")
    b = remember(caller, "The Apollo budget was approved.")
    assert (
        caller.post(f"/api/v1/memories/{a}/links", {"target_id": b, "kind": "references"}).status_code == 201
    )
    before = picture(pk(a))
    turn = Turn.objects.across_tenants("test").get(episode_id=pk(a))
    url = f"/admin/episodes/episode/{pk(a)}/change/"
    page = admin_client.get(url)
    assert "outgoing links (read-only" in page.content.decode().lower()

    # A hand-crafted post that edits and deletes the turn and deletes the link changes neither.
    forged = {
        **change_form(page),
        "turns-0-text": "something else",
        "turns-0-DELETE": "on",
        "out_links-0-DELETE": "on",
    }
    assert admin_client.post(url, forged).status_code == 302  # saved, as far as the form goes
    assert Turn.objects.across_tenants("test").get(pk=turn.pk).text == turn.text
    assert picture(pk(a)) == before
    # No page adds, changes or deletes a link or an episode by hand.
    link = Link.objects.across_tenants("test").get(src_id=pk(a))
    assert admin_client.get("/admin/episodes/link/add/").status_code == 403
    assert admin_client.post(f"/admin/episodes/link/{link.pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin_client.post(f"/admin/episodes/episode/{pk(a)}/delete/", {"post": "yes"}).status_code == 403
    assert (
        Link.objects.across_tenants("test").filter(pk=link.pk).exists()
        and Episode.objects.across_tenants("test").filter(pk=pk(a)).exists()
    )


# --- candidates ------------------------------------------------------------------------------------
def test_an_approved_delete_candidate_rolls_back(admin_client, provided):
    tenant = provided.tenant
    old = memory(tenant, text="A passing remark about rain in Oslo.", idle_days=300, seed=6)
    tick_run(tenant=tenant, now=NOW)
    candidate = Candidate.objects.across_tenants("test").get(tenant=tenant, kind="delete", episode_id=old)
    before = picture(old)

    admin_client.post(
        "/admin/lifecycle/candidate/", {"action": "approve", "_selected_action": [candidate.pk]}
    )
    assert Episode.objects.across_tenants("test").get(pk=old).state == State.FORGOTTEN
    entry = journaled(old, "delete")
    assert entry.actor == "admin:op"

    roll_back(entry)
    assert picture(old) == before
    assert Candidate.objects.across_tenants("test").get(pk=candidate.pk).status == Candidate.Status.PROPOSED


def test_an_approved_merge_rolls_back_with_its_link(admin_client, provided):
    tenant = provided.tenant
    candidate = merge_proposal(tenant)
    merged, survivor = candidate.episode_id, candidate.other_id
    assert survivor is not None
    before = {merged: picture(merged), survivor: picture(survivor)}
    assert before[merged]["in_redis"] and before[survivor]["in_redis"]

    admin_client.post(
        "/admin/lifecycle/candidate/", {"action": "approve", "_selected_action": [candidate.pk]}
    )
    assert (
        Link.objects.across_tenants("test")
        .filter(src_id=merged, dst_id=survivor, kind="merged_into")
        .exists()
    )
    assert not picture(merged)["in_redis"]
    entry = journaled(merged, "merge")
    assert entry.actor == "admin:op"

    roll_back(entry)
    assert {merged: picture(merged), survivor: picture(survivor)} == before
    assert Candidate.objects.across_tenants("test").get(pk=candidate.pk).status == Candidate.Status.PROPOSED
    assert_consistent(tenant)


# --- the purge -------------------------------------------------------------------------------------
def test_after_the_purge_the_forget_cannot_be_rolled_back_and_the_purge_is_logged(caller, caplog):
    public_id = remember(caller, "The locker code is 4312.")
    episode_id = pk(public_id)
    assert caller.delete(f"/api/v1/memories/{public_id}").status_code == 200
    forget = journaled(episode_id, "forget")
    grace = policy_row(caller.tenant).purge_grace_days

    # Within the grace period nothing is purged.
    assert purge_forgotten(tenant=caller.tenant, now=timezone.now(), grace_days=grace) == (0, [])
    caplog.set_level(logging.INFO, logger="lifecycle.forgetting")
    later = timezone.now() + timedelta(days=grace + 1)
    assert purge_forgotten(tenant=caller.tenant, now=later, grace_days=grace) == (1, [])
    assert not Episode.objects.across_tenants("test").filter(pk=episode_id).exists()
    logged = [r.getMessage() for r in caplog.records if r.name == "lifecycle.forgetting"]
    assert len(logged) == 1 and "purged 1 " in logged[0] and caller.tenant.name in logged[0]
    assert "4312" not in logged[0] and "locker" not in logged[0]

    purge = JournalEntry.objects.across_tenants("test").get(episode_id_value=episode_id, action="purge")
    with pytest.raises(RollbackError, match="no longer exists"):
        roll_back(forget)
    with pytest.raises(RollbackError, match="cannot be rolled back"):
        roll_back(purge)
    assert caller.post(f"/api/v1/memories/{public_id}/restore").status_code == 404
