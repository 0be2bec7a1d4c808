"""Every memory that is not forgotten is searched by default (issue 16, item 6): a state moves a
hit's rank, it does not hide it."""

from datetime import UTC, datetime

import pytest

from episodes.models import Episode, State
from lifecycle.tick import tick_run
from tests.conftest import Caller, unit_vectors

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_tick_years_after_the_turns_leaves_them_findable_by_default_search(caller):
    for n, text in enumerate(["we booked the lisbon hotel by the river", "the sourdough starter died again"]):
        response = caller.post(
            "/api/v1/turns",
            {
                "session_id": f"s{n}",
                "turns": [{"role": "user", "text": text, "occurred_at": f"2023-0{n + 3}-01T10:00:00Z"}],
            },
        )
        assert response.status_code == 201
    # What a team importing its history meets on day one: the scheduled tick, at today's date.
    run = tick_run(tenant=caller.tenant, now=datetime(2029, 1, 1, tzinfo=UTC))
    assert run.errors == []
    states = set(Episode.objects.filter(tenant=caller.tenant).values_list("state", flat=True))
    assert states <= {State.DORMANT, State.DELETE_CANDIDATE} and states, states

    found = caller.post("/api/v1/search", {"query": "lisbon hotel river", "explain": True}).json()["results"]
    assert found and "lisbon" in str(found[0]).lower()
    assert found[0]["state"] in {State.DORMANT, State.DELETE_CANDIDATE}
    assert found[0]["explain"]["state"] < 1.0
    context = caller.post("/api/v1/context", {"query": "lisbon hotel river"}).json()
    assert found[0]["episode_id"] in [item["episode_id"] for item in context["sections"]["relevant"]]
    only_active = {"query": "lisbon hotel river", "include_dormant": False}
    assert caller.post("/api/v1/search", only_active).json()["results"] == []


def test_a_dormant_memory_ranks_below_an_active_one_as_relevant():
    caller = Caller("states", embedder="provided")
    vector = unit_vectors(1, seed=5)[0].tolist()
    ids = [
        caller.post(
            "/api/v1/memories", {"text": "the harbour ferry leaves at nine", "vector": vector}
        ).json()["id"]
        for _ in range(3)
    ]
    Episode.objects.filter(public_id=ids[0]).update(state=State.DORMANT)
    Episode.objects.filter(public_id=ids[1]).update(state=State.DELETE_CANDIDATE)
    from lifecycle.hotsync import sync_episode

    for public_id in ids[:2]:
        assert sync_episode(caller.tenant.pk, Episode.objects.get(public_id=public_id).pk)
    hits = caller.post("/api/v1/search", {"query": "harbour ferry", "vector": vector}).json()["results"]
    assert [h["episode_id"] for h in hits] == [ids[2], ids[0], ids[1]]
