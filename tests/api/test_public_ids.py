"""Public ids (hardening issue, finding 8): what a tenant is shown says nothing of other tenants'
writes; old integer ids still name a memory during the transition."""

import re

import pytest

from episodes import public_ids
from episodes.models import Episode, Turn
from tests.public_answers import internal_ids

pytestmark = pytest.mark.django_db(transaction=True)

ULID = re.compile("[0-7][0-9A-HJKMNP-TV-Z]{25}")
#: Every key of an answer that holds a memory's or a turn's id.
ID_KEYS = {"id", "episode_id", "source_id", "target_id", "next_cursor"}
ID_LISTS = {"ids", "episode_ids", "turn_ids", "matched_turn_ids"}


def shown_ids(body):
    """Every id in an answer, wherever it is nested."""
    if isinstance(body, dict):
        for key, value in body.items():
            if key in ID_KEYS and value is not None:
                yield value
            elif key in ID_LISTS:
                yield from value
            else:
                yield from shown_ids(value)
            if key == "unpack":
                yield value.split("/")[-2]
    elif isinstance(body, list):
        for item in body:
            yield from shown_ids(item)


def random_part(public_id: str) -> int:
    """The 80 random bits after a ULID's 48-bit timestamp."""
    value = 0
    for char in public_id:
        value = value * 32 + public_ids.ALPHABET.index(char)
    return value & ((1 << 80) - 1)


def write_two_memories_around(caller, other, others_writes):
    first = caller.post("/api/v1/memories", {"text": "the first note about the harbour"}).json()
    for i in range(others_writes):
        other.post("/api/v1/memories", {"text": f"someone else's note {i}"})
    second = caller.post("/api/v1/memories", {"text": "the second note about the harbour"}).json()
    return first, second


def test_what_a_tenant_is_shown_does_not_count_other_tenants_writes(caller, outsider):
    first, second = write_two_memories_around(caller, outsider, others_writes=25)
    # Internally, the outsider's 25 writes came in between (the integer ids count them) ...
    assert (
        Episode.objects.across_tenants("test").get(public_id=second["id"]).pk
        - Episode.objects.across_tenants("test").get(public_id=first["id"]).pk
        == 26
    )
    # ... but what the caller is shown is random after its timestamp: no counter to read.
    a, b = (random_part(i) for i in (first["id"], second["id"]))
    assert abs(b - a) > 1_000_000

    answers = [
        first,
        second,
        caller.post(
            "/api/v1/turns", {"session_id": "s", "turns": [{"role": "user", "text": "harbour"}]}
        ).json(),
        caller.get("/api/v1/memories", {"limit": 1}).json(),
        caller.post("/api/v1/search", {"query": "harbour note"}).json(),
        caller.post("/api/v1/context", {"query": "harbour", "session_id": "s"}).json(),
        caller.post(f"/api/v1/memories/{first['id']}/links", {"target_id": second["id"]}).json(),
        caller.get(f"/api/v1/memories/{second['id']}").json(),
        caller.post(f"/api/v1/memories/{first['id']}/anchor").json(),
        caller.post("/api/v1/forget", {"kind": "fact", "dry_run": True}).json(),
        caller.delete(f"/api/v1/memories/{second['id']}").json(),
    ]
    internal = {str(pk) for pk in Episode.objects.across_tenants("test").values_list("pk", flat=True)}
    internal |= {str(pk) for pk in Turn.objects.across_tenants("test").values_list("pk", flat=True)}
    shown = [str(i) for answer in answers for i in shown_ids(answer)]
    assert len(shown) >= 20
    assert all(ULID.fullmatch(i) for i in shown), shown
    assert not internal & set(shown)


def test_old_integer_ids_and_lower_case_name_the_same_memory(caller, outsider):
    memory = caller.post("/api/v1/memories", {"text": "the spare key is under the blue pot"}).json()
    other = caller.post("/api/v1/memories", {"text": "the door code is 1234"}).json()
    pk = Episode.objects.across_tenants("test").get(public_id=memory["id"]).pk
    for name in (pk, memory["id"].lower()):
        assert caller.get(f"/api/v1/memories/{name}").json()["id"] == memory["id"]
    linked = caller.post(f"/api/v1/memories/{pk}/links", {"target_id": other["id"].lower()}).json()
    assert (linked["source_id"], linked["target_id"]) == (memory["id"], other["id"])
    assert caller.post("/api/v1/feedback", {"used": [pk]}).json() == {"used": 1, "unused": 0}
    # The same memory named two ways is still one memory.
    assert caller.post(f"/api/v1/memories/{pk}/links", {"target_id": memory["id"]}).status_code == 409
    assert caller.post("/api/v1/feedback", {"used": [pk], "unused": [memory["id"]]}).status_code == 409
    # Another tenant's memory, named either way, is not found.
    for name in (pk, memory["id"]):
        assert outsider.get(f"/api/v1/memories/{name}").status_code == 404
        assert outsider.post("/api/v1/feedback", {"used": [name]}).status_code == 404


@pytest.mark.parametrize(
    "bad",
    ["8ZZZZZZZZZZZZZZZZZZZZZZZZZ", "0000000000000000000000000O", "01", 0, -3, 10**18, True, 1.5, None, [1]],
)
def test_a_malformed_id_in_a_body_is_a_400(caller, bad):
    memory = caller.post("/api/v1/memories", {"text": "a note"}).json()
    response = caller.post(f"/api/v1/memories/{memory['id']}/links", {"target_id": bad})
    assert response.status_code == 400 and "target_id" in response.json()["error"]["details"]
    assert caller.post("/api/v1/feedback", {"used": [bad]}).status_code == 400


def test_a_cursor_names_a_memory_of_the_caller_only(caller, outsider):
    for i in range(3):
        caller.post("/api/v1/memories", {"text": f"note {i}"})
    page = caller.get("/api/v1/memories", {"limit": 1}).json()
    assert ULID.fullmatch(page["next_cursor"])
    assert (
        len(caller.get("/api/v1/memories", {"limit": 5, "cursor": page["next_cursor"]}).json()["results"])
        == 2
    )
    foreign = outsider.get("/api/v1/memories", {"cursor": page["next_cursor"]})
    assert foreign.status_code == 404 and "cursor" in foreign.json()["error"]["message"]
    assert caller.get("/api/v1/memories", {"cursor": "not-a-cursor"}).status_code == 400


def test_the_watch_on_every_answer_finds_integer_ids():
    """What ``tests/public_answers.py`` reads in every API answer of the suite."""
    public = "01JDQ6Z1X2V3W4Y5Z6A7B8C9D0"
    clean = {
        "id": public,
        "results": [{"episode_id": public, "matched_turn_ids": [public], "explain": {"best_turn_id": None}}],
        "scope": {"user_id": "42", "session_id": "7"},  # the caller's own names
        "metadata": {"order_id": 12},
        "unpack": f"/api/v1/memories/{public}/unpack",
    }
    assert list(internal_ids(clean)) == []
    leaks = {
        "results": [
            {"explain": {"best_turn_id": 3}, "turn_ids": [public, 4], "expand": "/api/v1/memories/5"}
        ],
        "source_id": "6",
    }
    assert sorted(internal_ids(leaks)) == [
        "$.results[0].expand='/api/v1/memories/5'",
        "$.results[0].explain.best_turn_id=3",
        "$.results[0].turn_ids=4",
        "$.source_id='6'",
    ]
