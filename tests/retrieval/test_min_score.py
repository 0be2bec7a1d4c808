"""`min_score` (docs/decisions/0016): a threshold on a score that means the same for every query, the
best cosine similarity between the query and a turn of the memory, in any layer."""

import pytest

from tests.conftest import unit_vectors

from .test_search import pack

pytestmark = pytest.mark.django_db(transaction=True)


def test_min_score_leaves_out_what_is_not_similar_enough(caller):
    ferry = caller.post("/api/v1/memories", {"text": "the harbour ferry leaves at nine"}).json()["id"]
    budget = caller.post("/api/v1/memories", {"text": "quarterly budget spreadsheet totals"}).json()["id"]
    pack(budget, "cold")  # a threshold on similarity means the same in every layer
    question = {"query": "when does the ferry leave the harbour?"}
    everything = caller.post("/api/v1/search", question).json()["results"]
    assert {h["episode_id"] for h in everything} == {ferry, budget}
    assert all("similarity" not in h for h in everything)

    kept = caller.post("/api/v1/search", {**question, "min_score": 0.3}).json()["results"]
    assert [h["episode_id"] for h in kept] == [ferry] and kept[0]["similarity"] >= 0.3
    low = caller.post("/api/v1/search", {**question, "min_score": -1.0}).json()["results"]
    assert {h["episode_id"] for h in low} == {ferry, budget}
    cold = next(h for h in low if h["episode_id"] == budget)
    assert cold["layer"] == "cold" and cold["similarity"] < 0.3
    assert caller.post("/api/v1/search", {**question, "min_score": 0.999}).json()["results"] == []

    context = caller.post("/api/v1/context", {**question, "min_score": 0.3}).json()
    assert [x["episode_id"] for x in context["sections"]["relevant"]] == [ferry]
    assert caller.post("/api/v1/search", {**question, "min_score": 1.5}).status_code == 400


def test_a_tenant_that_does_not_embed_queries_sends_a_vector_with_min_score(provided):
    vector = unit_vectors(1, seed=3)[0].tolist()
    provided.post("/api/v1/memories", {"text": "the harbour ferry", "vector": vector})
    response = provided.post("/api/v1/search", {"query": "ferry", "min_score": 0.5})
    assert response.status_code == 400 and "min_score" in response.json()["error"]["details"]
    context = provided.post("/api/v1/context", {"query": "ferry", "min_score": 0.5})
    assert context.status_code == 400 and "min_score" in context.json()["error"]["details"]
    hits = provided.post("/api/v1/search", {"vector": vector, "min_score": 0.99}).json()["results"]
    assert len(hits) == 1 and hits[0]["similarity"] == pytest.approx(1.0, abs=1e-4)
