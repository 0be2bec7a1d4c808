"""`POST /api/v1/forget` (by filter or retrievability threshold) and the FSRS feedback reviews."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from episodes.models import Episode, State
from episodes.stores.hot import hot_store
from lifecycle import scoring
from lifecycle.models import JournalEntry, policy_row
from lifecycle.services import feedback_review
from tests.conftest import Caller, pk, unit_vectors

from .factories import assert_consistent

pytestmark = pytest.mark.django_db(transaction=True)


def remember(caller, text, seed, **extra):
    body = {"text": text, "vector": unit_vectors(1, seed=seed)[0].tolist(), **extra}
    response = caller.post("/api/v1/memories", body)
    assert response.status_code == 201, response.json()
    return response.json()["id"]


@pytest.fixture
def memories(provided):
    return {
        "tea": remember(
            provided, "Alice prefers green tea", 1, kind="preference", tags=["drinks"], user_id="alice"
        ),
        "coffee": remember(
            provided, "Bob drinks coffee black", 2, kind="preference", tags=["drinks"], user_id="bob"
        ),
        "flight": remember(provided, "Flight LH123 leaves at 9", 3, kind="fact", user_id="alice"),
        "pinned": remember(
            provided, "Alice is vegetarian", 4, kind="preference", user_id="alice", anchor=True
        ),
    }


def snapshot(tenant):
    return list(
        Episode.objects.across_tenants("test")
        .filter(tenant=tenant)
        .order_by("pk")
        .values_list("pk", "state", "version")
    )


def test_dry_run_names_the_episodes_and_changes_nothing(provided, memories):
    before = snapshot(provided.tenant)
    in_redis = hot_store().episode_ids(provided.tenant.id.hex)
    response = provided.post("/api/v1/forget", {"kind": "preference", "user_id": "alice", "dry_run": True})
    assert response.status_code == 200, response.json()
    assert response.json() == {"dry_run": True, "count": 2, "ids": [memories["tea"], memories["pinned"]]}
    assert snapshot(provided.tenant) == before
    assert hot_store().episode_ids(provided.tenant.id.hex) == in_redis
    assert not JournalEntry.objects.across_tenants("test").exists()


def test_forget_by_filter_is_soft_journaled_and_restorable(provided, memories):
    response = provided.post("/api/v1/forget", {"tags": ["drinks"]})
    assert response.status_code == 200
    body = response.json()
    assert body["dry_run"] is False and sorted(body["ids"]) == sorted([memories["tea"], memories["coffee"]])
    assert set(
        Episode.objects.across_tenants("test")
        .filter(state=State.FORGOTTEN)
        .values_list("public_id", flat=True)
    ) == set(body["ids"])
    assert hot_store().episode_ids(provided.tenant.id.hex) == {pk(memories["flight"]), pk(memories["pinned"])}
    entries = JournalEntry.objects.across_tenants("test").filter(action="forget")
    assert entries.count() == 2 and {e.before["state"] for e in entries} == {"active"}
    assert entries.first().actor.startswith("api:")
    # Soft: the memory comes back within the grace period, and a second forget names nothing new.
    assert provided.post(f"/api/v1/memories/{memories['tea']}/restore").status_code == 200
    assert provided.post("/api/v1/forget", {"tags": ["drinks"]}).json()["ids"] == [memories["tea"]]
    assert_consistent(provided.tenant)


def test_forget_older_than_and_by_layer(provided, memories):
    Episode.objects.across_tenants("test").filter(public_id=memories["flight"]).update(
        first_occurred_at=timezone.now() - timedelta(days=400),
        last_occurred_at=timezone.now() - timedelta(days=400),
    )
    cutoff = (timezone.now() - timedelta(days=30)).isoformat()
    body = provided.post(
        "/api/v1/forget", {"older_than": cutoff, "layer": "hot", "all": True, "dry_run": True}
    ).json()
    assert body["ids"] == [memories["flight"]]


@pytest.mark.parametrize(
    "payload",
    [{"layer": "hot"}, {"older_than": "9999-01-01T00:00:00Z"}, {"anchor": False}, {"all": False}],
)
def test_narrowing_fields_alone_do_not_name_what_to_forget(provided, memories, payload):
    """Hardening finding 7: each of these selected every memory, with no cap."""
    before = snapshot(provided.tenant)
    response = provided.post("/api/v1/forget", payload)
    assert response.status_code == 400
    assert '"all": true' in response.json()["error"]["details"]["non_field_errors"][0]
    assert snapshot(provided.tenant) == before
    everything = provided.post("/api/v1/forget", {**payload, "all": True, "dry_run": True}).json()
    assert everything["dry_run"] and everything["count"] >= 1


def test_forget_by_retrievability_below_a_threshold(provided, memories):
    tenant = provided.tenant
    now = timezone.now()
    long_ago = now - timedelta(days=1000)
    # Memories last reviewed long ago with a short stability have faded; fresh ones have not.
    faded_ids = [memories["coffee"], memories["flight"], memories["pinned"]]
    Episode.objects.across_tenants("test").filter(public_id__in=faded_ids).update(
        stability=0.5, difficulty=8.0, last_review_at=long_ago, last_accessed_at=long_ago
    )
    policy = policy_row(tenant)
    for public_id in faded_ids:
        episode = Episode.objects.across_tenants("test").get(public_id=public_id)
        assert scoring.retrievability(scoring.EpisodeStats.from_episode(episode), policy, now) < 0.5
    # Combined with a filter, both must hold.
    dry = provided.post("/api/v1/forget", {"retrievability_below": 0.5, "user_id": "alice", "dry_run": True})
    assert dry.json()["ids"] == [memories["flight"]]
    body = provided.post("/api/v1/forget", {"retrievability_below": 0.5}).json()
    # the anchor has faded too, but anchors never decay; the fresh memory is well remembered
    assert sorted(body["ids"]) == sorted([memories["coffee"], memories["flight"]])
    assert Episode.objects.across_tenants("test").get(public_id=memories["pinned"]).state == State.ACTIVE
    assert Episode.objects.across_tenants("test").get(public_id=memories["tea"]).state == State.ACTIVE


@pytest.mark.parametrize(
    "payload, field",
    [
        ({}, "non_field_errors"),
        ({"dry_run": True}, "non_field_errors"),
        ({"session_id": ""}, "non_field_errors"),
        ({"kind": "fact", "colour": "red"}, "colour"),
        ({"retrievability_below": 1.5}, "retrievability_below"),
        ({"retrievability_below": "low"}, "retrievability_below"),
        ({"layer": "lukewarm"}, "layer"),
        ({"older_than": "yesterday"}, "older_than"),
        ({"tags": []}, "tags"),
        ({"tags": "drinks"}, "tags"),
    ],
)
def test_bad_input_is_refused_before_anything_is_touched(provided, memories, payload, field):
    before = snapshot(provided.tenant)
    response = provided.post("/api/v1/forget", payload)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid" and field in error["details"]
    assert snapshot(provided.tenant) == before


def test_an_outsider_cannot_forget_our_memories(provided, memories):
    outsider = Caller("outsider-co", embedder="provided")
    theirs = remember(outsider, "Outsider note", 9, kind="preference")
    before = snapshot(provided.tenant)
    body = outsider.post("/api/v1/forget", {"kind": "preference"}).json()
    assert body == {"dry_run": False, "count": 1, "ids": [theirs]}
    assert outsider.post("/api/v1/forget", {"retrievability_below": 1.0}).json()["ids"] == []
    assert snapshot(provided.tenant) == before
    assert hot_store().episode_ids(provided.tenant.id.hex) == {pk(m) for m in memories.values()}
    assert not JournalEntry.objects.across_tenants("test").filter(tenant=provided.tenant).exists()


def test_a_read_only_key_cannot_forget(provided, memories):
    reader = Caller("reader-co", scopes=("read",), embedder="provided")
    response = reader.post("/api/v1/forget", {"kind": "preference"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_feedback_reviews_used_and_unused_memories(provided, memories):
    tenant = provided.tenant
    now = timezone.now() + timedelta(days=3)
    assert (
        feedback_review(tenant=tenant, used=[pk(memories["tea"])], unused=[pk(memories["coffee"])], now=now)
        == 2
    )
    used = Episode.objects.across_tenants("test").get(public_id=memories["tea"])
    unused = Episode.objects.across_tenants("test").get(public_id=memories["coffee"])
    assert used.last_review_at == now == unused.last_review_at
    # Good raises stability more than Hard does (FSRS-6 reviews).
    assert used.stability > unused.stability and unused.difficulty > used.difficulty
    # Through the API, with an outsider's id refused.
    response = provided.post("/api/v1/feedback", {"used": [memories["flight"]], "unused": []})
    assert response.status_code == 200, response.json()
    assert Episode.objects.across_tenants("test").get(public_id=memories["flight"]).stability is not None
