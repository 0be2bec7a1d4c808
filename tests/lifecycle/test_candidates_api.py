"""The review of merge and delete proposals over the API: listed with both memories side by side,
approved or rejected by public id (scope admin), journaled, and never across tenants."""

from __future__ import annotations

import pytest

from episodes.models import Episode, State
from lifecycle.models import Candidate, JournalEntry
from tests.conftest import Caller

from .factories import NOW, vectors_near
from .test_merge_scope import crossing, said

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator(db) -> Caller:
    return Caller("review-co", scopes=("read", "write", "admin"), embedder="provided")


def proposal(tenant, seed: int = 21, *, user: str = "u-ann") -> Candidate:
    near = vectors_near(seed, 2, spread=0.01)
    return Candidate.objects.create(
        tenant=tenant,
        kind="merge",
        episode_id=said(tenant, user, near[0], text="Prefers tea in the morning."),
        other_id=said(tenant, user, near[1], text="Likes tea in the mornings."),
        similarity=0.98765,
        score=-1.2556074822028902,
        created_at=NOW,
    )


def test_the_queue_shows_both_memories_with_their_users_and_rounded_figures(operator):
    candidate = proposal(operator.tenant)
    answer = operator.get("/api/v1/candidates")
    assert answer.status_code == 200, answer.content
    [item] = answer.json()["results"]
    assert item["id"] == candidate.public_id and item["kind"] == "merge" and item["status"] == "proposed"
    assert (item["score"], item["similarity"]) == (-1.256, 0.988)
    assert item["memory"]["text"] == "Prefers tea in the morning."
    assert item["other"]["text"] == "Likes tea in the mornings."
    assert item["memory"]["user_id"] == item["other"]["user_id"] == "u-ann"
    assert (
        item["memory"]["id"] == Episode.objects.across_tenants("test").get(pk=candidate.episode_id).public_id
    )
    assert operator.get("/api/v1/candidates", {"status": "applied"}).json()["results"] == []
    assert operator.get("/api/v1/candidates", {"kind": "delete"}).json()["results"] == []


def test_approve_applies_softly_and_journals_reject_keeps_both(operator):
    merged, kept = proposal(operator.tenant, 21), proposal(operator.tenant, 22, user="u-joe")

    approved = operator.post(f"/api/v1/candidates/{merged.public_id}/approve")
    assert approved.status_code == 200, approved.content
    assert approved.json()["status"] == "applied" and approved.json()["decided_by"].startswith("api:")
    gone = Episode.objects.across_tenants("test").get(pk=merged.episode_id)
    assert gone.state == State.FORGOTTEN  # soft: restorable within the grace period
    assert (
        JournalEntry.objects.across_tenants("test")
        .filter(tenant=operator.tenant, action="merge", episode_id_value=merged.episode_id)
        .exists()
    )

    rejected = operator.post(f"/api/v1/candidates/{kept.public_id}/reject")
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert Episode.objects.across_tenants("test").get(pk=kept.episode_id).state != State.FORGOTTEN

    again = operator.post(f"/api/v1/candidates/{kept.public_id}/approve")
    assert again.status_code == 409 and "already rejected" in again.json()["error"]["message"]


def test_a_merge_across_users_is_refused_with_a_conflict(operator):
    candidate = crossing(operator.tenant)
    answer = operator.post(f"/api/v1/candidates/{candidate.public_id}/approve")
    assert answer.status_code == 409 and "u-chen" in answer.json()["error"]["message"]
    assert Candidate.objects.across_tenants("test").get(pk=candidate.pk).status == "proposed"


def test_an_outsider_neither_sees_nor_decides_another_tenants_proposals(operator):
    theirs = proposal(operator.tenant)
    outsider = Caller("outsider-co", scopes=("read", "write", "admin"), embedder="provided")
    assert outsider.get("/api/v1/candidates").json()["results"] == []
    for decision in ("approve", "reject"):
        answer = outsider.post(f"/api/v1/candidates/{theirs.public_id}/{decision}")
        assert answer.status_code == 404
    assert Candidate.objects.across_tenants("test").get(pk=theirs.pk).status == "proposed"
    # An integer key is not an id here either.
    assert operator.post(f"/api/v1/candidates/{theirs.pk}/approve").status_code == 404


def test_the_review_needs_the_admin_scope(operator):
    candidate = proposal(operator.tenant)
    writer = Caller("writer", tenant=operator.tenant)
    assert writer.get("/api/v1/candidates").status_code == 403
    assert writer.post(f"/api/v1/candidates/{candidate.public_id}/approve").status_code == 403
    assert operator.get("/api/v1/candidates", {"limit": 0}).status_code == 400
    assert operator.get("/api/v1/candidates", {"status": "maybe"}).status_code == 400
