"""Scope and tag filters match exactly, letter case and all, in every tier and endpoint
(hardening finding 2: the hot tier matched "alice" for "ALICE" and split a tag at its comma)."""

import pytest

from episodes.models import Episode
from lifecycle.services import episode_pack

from ..conftest import pk, unit_vectors

pytestmark = pytest.mark.django_db(transaction=True)

VECTOR = unit_vectors(1, seed=11)[0]

# (memory fields, the filter that must find it and not its twin)
TWINS = {
    "user_id": ({"user_id": "alice"}, {"user_id": "ALICE"}),
    "agent_id": ({"agent_id": "bot"}, {"agent_id": "Bot"}),
    "session_id": ({"session_id": "s1"}, {"session_id": "S1"}),
    "kind": ({"kind": "memo"}, {"kind": "Memo"}),
    "tags": ({"tags": ["red,blue"]}, {"tags": ["red"]}),
}


def _search_filter(fields):
    if "kind" in fields:
        return {"kinds": [fields["kind"]]}
    return dict(fields)


@pytest.fixture
def twins(provided):
    made = {}
    for name, pair in TWINS.items():
        made[name] = [
            provided.post(
                "/api/v1/memories", {"text": f"{name} twin {i}", "vector": VECTOR.tolist(), **fields}
            ).json()["id"]
            for i, fields in enumerate(pair)
        ]
    return made


def _found(caller, layer, fields):
    body = caller.post(
        "/api/v1/search",
        {"vector": VECTOR.tolist(), "layers": [layer], "limit": 50, **_search_filter(fields)},
    ).json()
    return {hit["episode_id"] for hit in body["results"]}


@pytest.mark.parametrize("name", list(TWINS))
def test_each_filter_is_exact_in_hot_and_warm(provided, twins, name):
    for layer in ("hot", "warm"):
        if layer == "warm":
            for public_id in twins[name]:
                episode_pack(
                    tenant=provided.tenant, episode_id=pk(public_id), layer="warm", now=_now(), actor="test"
                )
            assert set(
                Episode.objects.across_tenants("test")
                .filter(public_id__in=twins[name])
                .values_list("layer", flat=True)
            ) == {"warm"}
        for i, fields in enumerate(TWINS[name]):
            assert _found(provided, layer, fields) == {twins[name][i]}, (layer, fields)


def test_the_list_endpoint_filters_exactly(provided, twins):
    for name, (first, second) in TWINS.items():
        query = {"tag": first["tags"][0]} if name == "tags" else first
        listed = provided.get("/api/v1/memories", query).json()["results"]
        assert [m["id"] for m in listed] == [twins[name][0]], name


def test_context_keeps_one_users_facts_from_another(provided):
    for user, pin in (("alice", "4411"), ("ALICE", "9000")):
        provided.post(
            "/api/v1/memories",
            {"user_id": user, "text": f"her PIN is {pin}", "vector": VECTOR.tolist()},
        )
    context = provided.post(
        "/api/v1/context", {"user_id": "ALICE", "query": "what is her PIN", "max_tokens": 500}
    ).json()["text"]
    assert "9000" in context and "4411" not in context


def _now():
    from django.utils import timezone

    return timezone.now()
