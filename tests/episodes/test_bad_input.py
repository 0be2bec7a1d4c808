"""Bad input gets a clear 4xx with the error envelope and writes nothing."""

import json

import pytest

from episodes.models import Episode, Link, Turn
from tests.conftest import unit_vectors

pytestmark = pytest.mark.django_db


def _counts():
    return (
        Turn.objects.across_tenants("test").count(),
        Episode.objects.across_tenants("test").count(),
        Link.objects.across_tenants("test").count(),
    )


def _good_turn(**overrides):
    turn = {"role": "user", "text": "hello"}
    turn.update(overrides)
    return turn


TOO_LONG = "x" * 32_001


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"turns": [_good_turn(), {"role": "user"}]}, "turns"),
        ({"turns": [_good_turn(text="")]}, "turns"),
        ({"turns": [_good_turn(text="   ")]}, "turns"),
        ({"turns": [_good_turn(text=TOO_LONG)]}, "turns"),
        ({"turns": [_good_turn(occurred_at="last blursday")]}, "turns"),
        ({"turns": [_good_turn(role="wizard")]}, "turns"),
        ({"turns": [_good_turn(role="memory")]}, "turns"),
        ({"turns": [_good_turn(colour="blue")]}, "turns"),
        ({"turns": [_good_turn()], "tenant_id": "someone-else"}, "tenant_id"),
        ({"turns": []}, "turns"),
        ({"turns": "hello"}, "turns"),
        ({"turns": [_good_turn(metadata=["not", "an", "object"])]}, "turns"),
        ({"turns": [_good_turn(metadata={"blob": "x" * 20_000})]}, "turns"),
        ({"turns": [_good_turn(vector=[0.1] * 10)]}, "turns"),
        ({"turns": [_good_turn(vector=[0.0] * 384)]}, "turns"),
        ({"turns": [_good_turn(vector=["a"] * 384)]}, "turns"),
        ({"turns": [_good_turn(vector=["0.5"] + [0.1] * 383)]}, "turns"),
        ({"turns": [_good_turn(vector=[True] + [0.1] * 383)]}, "turns"),
        ({"turns": [_good_turn(vector=[[0.1]] + [0.1] * 383)]}, "turns"),
        ({"turns": [_good_turn(vector=[None] + [0.1] * 383)]}, "turns"),
        ({"turns": [_good_turn(session_id="s" * 300)]}, "turns"),
    ],
)
def test_bad_turns_are_400_and_write_nothing(caller, payload, field):
    before = _counts()
    response = caller.post("/api/v1/turns", payload)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert field in error["details"]
    assert _counts() == before


def test_nan_in_a_vector_is_400(caller):
    before = _counts()
    body = '{"turns": [{"role": "user", "text": "hi", "vector": [NaN' + ", 0.1" * 383 + "]}]}"
    response = caller.client.post("/api/v1/turns", body, content_type="application/json")
    assert response.status_code == 400
    assert "error" in response.json()
    assert _counts() == before


def test_nan_in_a_memory_vector_is_400(provided):
    before = _counts()
    body = '{"text": "hi", "vector": [Infinity' + ", 0.1" * 383 + "]}"
    response = provided.client.post("/api/v1/memories", body, content_type="application/json")
    assert response.status_code == 400
    assert _counts() == before


def test_an_oversized_batch_is_413(caller):
    before = _counts()
    response = caller.post("/api/v1/turns", {"turns": [_good_turn() for _ in range(501)]})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"
    assert _counts() == before


def test_a_batch_with_more_text_than_is_embedded_before_the_answer_is_413_unless_async(caller, settings):
    settings.MEMORY = {**settings.MEMORY, "MAX_SYNC_BATCH_CHARS": 50_000}
    turns = [_good_turn(text=f"turn {i} " + "z" * 9_990) for i in range(6)]  # 60,000 characters
    before = _counts()
    response = caller.post("/api/v1/turns", {"session_id": "big", "turns": turns})
    assert response.status_code == 413, response.json()
    message = response.json()["error"]["message"]
    assert "at most 50000 characters" in message and '"async": true' in message
    assert _counts() == before
    # Within the limit, or queued for a worker: written.
    assert caller.post("/api/v1/turns", {"session_id": "big", "turns": turns[:4]}).status_code == 201
    queued = caller.post("/api/v1/turns", {"session_id": "big", "turns": turns, "async": True})
    assert queued.status_code == 201, queued.json()
    assert _counts()[0] == before[0] + 10


def test_a_body_over_the_request_limit_is_413(caller):
    before = _counts()
    body = '{"turns": [' + ",".join(['{"role": "user", "text": "' + "y" * 30_000 + '"}'] * 200) + "]}"
    response = caller.client.post("/api/v1/turns", body, content_type="application/json")
    assert response.status_code == 413
    assert _counts() == before


def test_malformed_json_is_400(caller):
    response = caller.client.post("/api/v1/turns", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


def test_a_provided_tenant_must_send_vectors(provided):
    before = _counts()
    response = provided.post("/api/v1/turns", {"turns": [_good_turn()]})
    assert response.status_code == 400
    assert "vector" in response.json()["error"]["details"]["turns"][0]
    assert _counts() == before


@pytest.mark.parametrize(
    "payload",
    [
        {"text": ""},
        {"text": "ok", "kind": "not a slug!"},
        {"text": "ok", "tags": "not-a-list"},
        {"text": "ok", "anchor": "perhaps"},
        {"text": "ok", "vector": [1.0] * 383},
        {"text": "ok", "surprise": 1},
    ],
)
def test_bad_memories_are_400_and_write_nothing(caller, payload):
    before = _counts()
    response = caller.post("/api/v1/memories", payload)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert _counts() == before


def test_linking_to_itself_is_409(provided):
    """A well-formed request that cannot be done (the schema cannot say "not the path's id")."""
    vector = unit_vectors(1)[0].tolist()
    episode_id = provided.post("/api/v1/memories", {"text": "a", "vector": vector}).json()["id"]
    response = provided.post(f"/api/v1/memories/{episode_id}/links", {"target_id": episode_id})
    assert response.status_code == 409


def _nested(depth):
    value = {"leaf": 1}
    for _ in range(depth):
        value = {"n": value}
    return value


@pytest.mark.parametrize(
    "body",
    [
        "[" * 100_000 + "]" * 100_000,  # Python's decoder gives up with RecursionError
        '{"turns": [{"role": "user", "text": "hi", "metadata": ' + json.dumps(_nested(950)) + "}]}",
        '{"turns": [{"role": "user", "text": "hi", "metadata": ' + json.dumps(_nested(40)) + "}]}",
        '{"turns": [{"role": "user", "text": "hi", "metadata": {"k\\u0000": 1}}]}',
        '{"turns": [{"role": "user", "text": "hi", "metadata": {"k": "v\\u0000"}}]}',
        '{"turns": [{"role": "user", "text": "nul \\u0000 here"}]}',
        '{"turns": [{"role": "user", "text": "hi"}], "session_id": "s\\u0000"}',
        '{"turns": [{"role": "user", "text": "lone \\ud800 half"}]}',
        '{"turns": [{"role": "user", "text": "hi", "metadata": {"k\\udfff": "v"}}]}',
        '{"turns": [{"role": "user", "text": "hi", "metadata": {"k": NaN}}]}',
        '{"turns": [{"role": "user", "text": "hi", "metadata": {"k": -Infinity}}]}',
        '{"turns": [{"role": "user", "text": "hi", "metadata": {"k": 1e400}}]}',
    ],
    ids=[
        "deep-array",
        "deep-metadata-950",
        "deep-metadata-40",
        "nul-key",
        "nul-value",
        "nul-text",
        "nul-scope",
        "surrogate-text",
        "surrogate-key",
        "nan-metadata",
        "infinity-metadata",
        "overflow-metadata",
    ],
)
def test_deep_nesting_and_nul_characters_are_400_and_write_nothing(caller, body):
    """Hardening finding 6: each of these was a 500 (or stored, then broke the admin page)."""
    before = _counts()
    response = caller.client.post("/api/v1/turns", body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["code"] == "parse_error"
    assert _counts() == before


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ('{"query": "q", "vector": [0.5, 0.25, 1e400, 0.125]}', "vector[2]: numbers must be finite"),
        ('{"query": "q", "vector": [0.5, 1, -1e400]}', "vector[2]: numbers must be finite"),
        ('{"turns": [{"text": "hi", "metadata": {"k": [1e400]}}]}', "turns[0].metadata.k[0]: numbers"),
        (
            '{"turns": [{"text": "hi", "metadata": {"a": {"k\\u0000": 1}}}]}',
            "a key in turns[0].metadata.a: text",
        ),
        ('{"turns": [{"text": "ok"}, {"text": "x\\u0000"}]}', "turns[1].text: text must not contain the NUL"),
        ('{"k\\u0000": 1}', "a key in the body: text must not"),
    ],
)
def test_a_refused_body_says_where(caller, body, where):
    """The parser's message names the place of what it refused, a vector's coordinate included."""
    before = _counts()
    response = caller.client.post("/api/v1/turns", body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert where in response.json()["error"]["message"], response.json()
    assert _counts() == before


def test_metadata_a_little_nested_is_still_fine(caller):
    response = caller.post("/api/v1/turns", {"turns": [_good_turn(metadata=_nested(10))]})
    assert response.status_code == 201, response.content
