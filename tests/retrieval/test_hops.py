"""One hop from the best candidates (docs/decisions/0032): a memory sharing a rare entity with the
best hit, or linked from it, joins the results below it when the search follows hops; an
entity many memories name is not followed; nothing of another tenant, or outside the search's
scope, ever enters this way; a use of a memory reached by a hop counts as a traversal."""

import pytest

from episodes.models import Episode
from retrieval.usage import recorder
from tests.conftest import Caller
from tests.hashing_embedder import HashingEmbedder

pytestmark = pytest.mark.django_db(transaction=True)

BILLING = "We picked Nimbus for the billing rewrite."
SLIP = "The team said Nimbus slipped to March."
FILLER = [
    "The team said Dana booked the offsite.",
    "The team said Dana fixed the printer.",
    "The team said Dana ordered new chairs.",
    "The team said Dana moved the standup.",
    "The team said Dana renewed the lease.",
]


@pytest.fixture
def team(db) -> Caller:
    # Vectors only from the caller: a text query finds what shares its words, nothing else.
    return Caller("hops-team", embedder="provided")


def episode_of(caller, session, text, user="u1") -> str:
    """A one-turn memory, with the caller's vector (searches below send none: text alone)."""
    vector = HashingEmbedder().embed_one(text).tolist()
    response = caller.post(
        "/api/v1/turns",
        {"session_id": session, "user_id": user, "turns": [{"role": "user", "text": text, "vector": vector}]},
    )
    assert response.status_code == 201, response.json()
    return response.json()["episode_ids"][0]


def hits(caller, query, **extra):
    response = caller.post("/api/v1/search", {"query": query, "explain": True, **extra})
    assert response.status_code == 200, response.json()
    return response.json()["results"]


def test_a_memory_sharing_a_rare_entity_with_the_best_hit_joins_below_it(team):
    billing = episode_of(team, "s1", BILLING)
    slip = episode_of(team, "s2", SLIP)
    assert "Nimbus" in Episode.objects.across_tenants("test").get(public_id=billing).entities
    assert "Nimbus" in Episode.objects.across_tenants("test").get(public_id=slip).entities

    assert [h["episode_id"] for h in hits(team, "billing rewrite")] == [billing]
    found = hits(team, "billing rewrite", hops=True)
    assert [h["episode_id"] for h in found] == [billing, slip]
    assert found[1]["explain"]["source"] == "hop"
    assert found[1]["explain"]["hop"] == {"via": "entity", "name": "Nimbus"}
    assert found[1]["score"] < found[0]["score"]


def test_an_entity_many_memories_name_is_not_followed(team):
    offsite = episode_of(team, "s0", FILLER[0])
    for i, text in enumerate(FILLER[1:], start=1):
        episode_of(team, f"s{i}", text)
    assert all(
        "Dana" in e.entities for e in Episode.objects.across_tenants("test").filter(tenant=team.tenant)
    )
    # Dana is named by five memories: more than hops.RARE others share it with the best hit.
    assert [h["episode_id"] for h in hits(team, "offsite", hops=True)] == [offsite]


def test_a_link_from_the_best_hit_is_followed_and_its_use_counts_as_a_traversal(team):
    billing = episode_of(team, "s1", BILLING)
    budget = episode_of(team, "s2", "Quarterly budget approved.")
    linked = team.post(f"/api/v1/memories/{billing}/links", {"target_id": budget, "kind": "related"})
    assert linked.status_code == 201, linked.json()

    found = hits(team, "billing rewrite", hops=True)
    assert [h["episode_id"] for h in found] == [billing, budget]
    assert found[1]["explain"]["hop"] == {"via": "link", "name": "related"}
    recorder.flush()
    seed, reached = (
        Episode.objects.across_tenants("test").get(public_id=billing),
        Episode.objects.across_tenants("test").get(public_id=budget),
    )
    assert (seed.access_count, seed.traverse_count) == (1, 0)
    assert (reached.access_count, reached.traverse_count) == (0, 1)


def test_nothing_of_another_tenant_or_outside_the_scope_enters_through_a_hop(team):
    outsider = Caller("hops-outsider", embedder="provided")
    billing = episode_of(team, "s1", BILLING)
    episode_of(outsider, "s1", SLIP)  # the outsider's memory names Nimbus too
    other_user = episode_of(team, "s2", SLIP, user="u2")

    assert [h["episode_id"] for h in hits(team, "billing rewrite", hops=True)] == [billing, other_user]
    assert [h["episode_id"] for h in hits(team, "billing rewrite", hops=True, user_id="u1")] == [billing]
    # And the outsider's own search reaches nothing of the team's.
    assert hits(outsider, "billing rewrite", hops=True) == []


def test_hops_must_be_a_boolean(team):
    response = team.post("/api/v1/search", {"query": "billing", "hops": "sometimes"})
    assert response.status_code == 400
    assert "hops" in response.json()["error"]["details"]
