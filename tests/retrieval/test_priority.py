"""Search ranks by the tenant's own priority: the policy's weights, not a second copy."""

import pytest

from lifecycle.models import MemoryPolicy

from ..conftest import unit_vectors

pytestmark = pytest.mark.django_db(transaction=True)


def _ranked(caller, vector):
    body = caller.post("/api/v1/search", {"vector": vector.tolist(), "explain": True}).json()
    return [hit["episode_id"] for hit in body["results"]]


def test_the_policys_anchor_weight_moves_an_anchor_in_search(provided):
    query = unit_vectors(1, seed=7)[0]
    noise = unit_vectors(1, seed=8)[0]
    near = query + 0.05 * noise
    near /= (near**2).sum() ** 0.5
    # The plain memory is the nearest (vector rank 1), the anchor next (rank 2).
    plain = provided.post("/api/v1/memories", {"text": "plain", "vector": query.tolist()}).json()["id"]
    anchor = provided.post(
        "/api/v1/memories", {"text": "pinned", "anchor": True, "vector": near.tolist()}
    ).json()["id"]

    # The default priority weights: an anchor's importance (0.3) lifts it over a slightly nearer hit
    # where one rank is worth little (k = 60: 1.6% of the score; at the default k = 10, 9%, it
    # lifts it over near-ties only).
    MemoryPolicy.objects.across_tenants("test").filter(tenant=provided.tenant).update(rrf_k=60)
    assert _ranked(provided, query)[:2] == [anchor, plain]

    MemoryPolicy.objects.across_tenants("test").filter(tenant=provided.tenant).update(
        priority_anchor_weight=0.0
    )
    assert _ranked(provided, query)[:2] == [plain, anchor]

    MemoryPolicy.objects.across_tenants("test").filter(tenant=provided.tenant).update(
        priority_anchor_weight=0.3
    )
    assert _ranked(provided, query)[:2] == [anchor, plain]


def test_activation_without_a_query_ranks_by_the_policys_priority(provided):
    vectors = unit_vectors(2, seed=3)
    older = provided.post(
        "/api/v1/memories", {"text": "rule one", "kind": "rule", "vector": vectors[0].tolist()}
    ).json()["id"]
    pinned = provided.post(
        "/api/v1/memories",
        {"text": "rule two", "kind": "rule", "anchor": True, "vector": vectors[1].tolist()},
    ).json()["id"]
    first = provided.post("/api/v1/activate", {"kind": "rule", "limit": 2}).json()["results"]
    assert [hit["episode_id"] for hit in first] == [pinned, older]

    # Recency and frequency out, the anchor weight against it: the anchor now ranks last.
    MemoryPolicy.objects.across_tenants("test").filter(tenant=provided.tenant).update(
        priority_recency_weight=0.0, priority_frequency_weight=0.0, priority_anchor_weight=0.0
    )
    scores = provided.post("/api/v1/activate", {"kind": "rule", "limit": 2}).json()["results"]
    assert {hit["score"] for hit in scores} == {0.0}
