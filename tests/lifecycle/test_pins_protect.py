"""A pin protects, and a use revives: a pinned, unpacked or used memory is current again (active,
its open proposals withdrawn, journaled), and a proposal is never approved on a memory that is
pinned or changed since it was proposed: over the API a 409 that says why, and nothing forgotten."""

from __future__ import annotations

from datetime import timedelta

import pytest

from episodes.models import Episode, Layer, State
from episodes.stores import rows
from lifecycle.candidates import CandidateError, candidate_approve, propose_delete
from lifecycle.models import Candidate, JournalEntry
from lifecycle.rollback import rollback_journal_entry
from lifecycle.services import episode_pack
from tests.conftest import Caller

from .factories import NOW

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator(db) -> Caller:
    return Caller("bakery", scopes=("read", "write", "admin"))


def _decaying(caller: Caller, text: str, *, layer: str = Layer.HOT) -> tuple[Episode, Candidate]:
    """A memory the tick has judged a delete candidate, with its open proposal (as the tick makes
    them: the state written first, then the proposal with the memory's version)."""
    public = caller.post("/api/v1/memories", {"text": text, "user_id": "lena"}).json()["id"]
    episode = Episode.objects.for_tenant(caller.tenant).get(public_id=public)
    if layer != Layer.HOT:
        episode_pack(tenant=caller.tenant, episode_id=episode.pk, layer=layer, now=NOW, actor="test")
    Episode.objects.for_tenant(caller.tenant).filter(pk=episode.pk).update(state=State.DELETE_CANDIDATE)
    episode.refresh_from_db()
    candidate = Candidate.objects.for_tenant(caller.tenant).get(
        pk=propose_delete(caller.tenant, episode, -4.5, NOW)
    )
    assert candidate.episode_version == episode.version
    return episode, candidate


def _journal(caller: Caller, episode: Episode, action: str) -> list[JournalEntry]:
    return list(JournalEntry.objects.for_tenant(caller.tenant).filter(episode=episode, action=action))


def test_a_pin_withdraws_the_delete_proposal_and_the_memory_is_active_again(operator):
    episode, candidate = _decaying(operator, "The bakery pays 1900 euros monthly rent.", layer=Layer.WARM)

    pinned = operator.post(f"/api/v1/memories/{episode.public_id}/anchor")
    assert pinned.status_code == 200, pinned.content

    episode.refresh_from_db()
    candidate.refresh_from_db()
    assert (episode.anchor, episode.state) == (True, State.ACTIVE)
    assert candidate.status == Candidate.Status.REJECTED and candidate.note.startswith("pin:")
    [entry] = _journal(operator, episode, "state")
    assert entry.before == {"state": State.DELETE_CANDIDATE}
    assert entry.after["withdrawn_candidates"] == [candidate.pk] and entry.after["reason"] == "pin"
    # Approving what was withdrawn is refused; the memory stays.
    again = operator.post(f"/api/v1/candidates/{candidate.public_id}/approve")
    assert again.status_code == 409 and "already rejected" in again.json()["error"]["message"]
    episode.refresh_from_db()
    assert episode.state == State.ACTIVE

    # Rolling the revival back puts the state and the open proposal back, as the tick's own state
    # changes are undone.
    rollback_journal_entry(entry, now=NOW + timedelta(minutes=1), actor="test")
    candidate.refresh_from_db()
    episode.refresh_from_db()
    assert candidate.status == Candidate.Status.PROPOSED and episode.state == State.DELETE_CANDIDATE


def test_approving_a_proposal_on_a_pinned_memory_is_refused_and_forgets_nothing(operator):
    episode, candidate = _decaying(operator, "Tomas prefers invoices as PDF by email.")
    # Pinned by a path that does not withdraw (the row written directly): the approval itself
    # must look.
    Episode.objects.for_tenant(operator.tenant).filter(pk=episode.pk).update(anchor=True)

    answer = operator.post(f"/api/v1/candidates/{candidate.public_id}/approve")
    assert answer.status_code == 409, answer.content
    assert "is pinned" in answer.json()["error"]["message"]
    episode.refresh_from_db()
    candidate.refresh_from_db()
    assert episode.state == State.DELETE_CANDIDATE and candidate.status == Candidate.Status.PROPOSED
    assert _journal(operator, episode, "delete") == []


def test_approving_a_proposal_on_a_memory_used_since_is_refused(operator):
    episode, candidate = _decaying(operator, "Lena's oven is a Rational combi oven bought in 2019.")
    # A search hit used since (an access moves the version), without the state changing yet.
    rows.uses_add({(operator.tenant.pk, episode.pk): rows.Use(accesses=1, traversals=0, at=NOW)})

    with pytest.raises(CandidateError, match="changed since it was proposed"):
        candidate_approve(candidate=candidate, now=NOW, actor="test")
    answer = operator.post(f"/api/v1/candidates/{candidate.public_id}/approve")
    assert answer.status_code == 409 and "changed since it was proposed" in answer.json()["error"]["message"]
    episode.refresh_from_db()
    assert episode.state == State.DELETE_CANDIDATE


def test_an_unchanged_proposal_is_still_approved(operator):
    episode, candidate = _decaying(operator, "The rye flour comes from Kornmühle Weber.")
    answer = operator.post(f"/api/v1/candidates/{candidate.public_id}/approve")
    assert answer.status_code == 200, answer.content
    episode.refresh_from_db()
    assert episode.state == State.FORGOTTEN


@pytest.mark.parametrize("use", ["unpack", "feedback"])
def test_an_unpack_or_a_reported_use_revives_a_delete_candidate(operator, use):
    episode, candidate = _decaying(
        operator, "Congratulations on signing the lease at 1750 a month.", layer=Layer.COLD
    )
    if use == "unpack":
        answer = operator.post(f"/api/v1/memories/{episode.public_id}/unpack")
    else:
        answer = operator.post("/api/v1/feedback", {"used": [episode.public_id]})
    assert answer.status_code == 200, answer.content

    episode.refresh_from_db()
    candidate.refresh_from_db()
    assert episode.state == State.ACTIVE
    assert candidate.status == Candidate.Status.REJECTED
    [entry] = _journal(operator, episode, "state")
    assert entry.after["reason"] == ("unpack" if use == "unpack" else "used")
    # A dormant memory unpacked or used is active again too; an active one is left as it is.
    Episode.objects.for_tenant(operator.tenant).filter(pk=episode.pk).update(state=State.DORMANT)
    assert operator.post("/api/v1/feedback", {"used": [episode.public_id]}).status_code == 200
    episode.refresh_from_db()
    assert episode.state == State.ACTIVE
    assert operator.post("/api/v1/feedback", {"used": [episode.public_id]}).status_code == 200
    assert len(_journal(operator, episode, "state")) == 2
