"""Every memory that is not forgotten is searched by default (docs/decisions/0015): a state moves a
hit's rank, it does not hide it."""

from datetime import UTC, datetime

import pytest

from episodes.models import Episode, State
from episodes.stores.rows import RankRow
from lifecycle.tick import tick_run

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
    states = set(
        Episode.objects.across_tenants("test").filter(tenant=caller.tenant).values_list("state", flat=True)
    )
    assert states <= {State.DORMANT, State.DELETE_CANDIDATE} and states, states

    found = caller.post("/api/v1/search", {"query": "lisbon hotel river", "explain": True}).json()["results"]
    assert found and "lisbon" in str(found[0]).lower()
    assert found[0]["state"] in {State.DORMANT, State.DELETE_CANDIDATE}
    assert found[0]["explain"]["state"] < 1.0
    context = caller.post("/api/v1/context", {"query": "lisbon hotel river"}).json()
    assert found[0]["episode_id"] in [item["episode_id"] for item in context["sections"]["relevant"]]
    only_active = {"query": "lisbon hotel river", "include_dormant": False}
    assert caller.post("/api/v1/search", only_active).json()["results"] == []


def test_a_dormant_memory_ranks_below_an_active_one_as_relevant(caller):
    from lifecycle.models import policy_row
    from retrieval.ranking import STATE_WEIGHTS, rerank
    from retrieval.weights import platform_weights

    now = datetime(2026, 6, 1, tzinfo=UTC)
    then = datetime(2026, 5, 1, tzinfo=UTC)
    states = [State.DELETE_CANDIDATE, State.DORMANT, State.ACTIVE]
    ranked = {
        pk: RankRow(pk, "cold", state, False, 0, then, then, then, then)
        for pk, state in enumerate(states, start=1)
    }
    order = rerank(ranked, {pk: 0.5 for pk in ranked}, platform_weights(), policy_row(caller.tenant), now)
    assert [pk for pk, _, _ in order] == [3, 2, 1]  # as relevant, as used: active, dormant, candidate
    active, dormant, candidate = (score for _, score, _ in order)
    assert dormant / active == pytest.approx(STATE_WEIGHTS[State.DORMANT])
    assert candidate / active == pytest.approx(STATE_WEIGHTS[State.DELETE_CANDIDATE])
    # A little more relevance outweighs the state: it moves a hit by a rank or so, no more.
    order = rerank(ranked, {1: 0.55, 2: 0.5, 3: 0.5}, platform_weights(), policy_row(caller.tenant), now)
    assert order[0][0] == 1
