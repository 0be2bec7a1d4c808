"""The Python client (clients/python) against a real server of the test suite (pytest-django's
live server on the embedded Postgres and Redis), and against the OpenAPI schema."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import re

import httpx
import pytest
from django.conf import settings
from django.test import override_settings
from memory_platform_client import (
    AsyncMemoryClient,
    Forbidden,
    Gone,
    MemoryClient,
    NotFound,
    RateLimited,
    SearchResults,
    Turn,
    Unauthenticated,
    Unavailable,
)
from memory_platform_client.client import _Api

from tests.conftest import Caller, pk

pytestmark = pytest.mark.django_db(transaction=True)

CONVERSATION = [
    Turn(role="user", text="My daughter Mia starts violin lessons next Tuesday."),
    Turn(role="assistant", text="Lovely! Who is her teacher?"),
    Turn(role="user", text="Mrs. Alvarez, she teaches at the Eastside music school."),
]


@pytest.fixture
def team(db):
    return Caller(
        "client-team", scopes=("read", "write", "admin"), embedder="tests.hashing_embedder.HashingEmbedder"
    )


def test_remember_and_recall(live_server, team):
    with MemoryClient(live_server.url, team.secret) as client:
        written = client.add_turns("chat-1", CONVERSATION, user_id="dad")
        assert written.searchable and len(written.turn_ids) == 3 and len(written.episode_ids) == 1
        found = client.search("violin teacher", user_id="dad", limit=3)
        assert isinstance(found, SearchResults)
        assert found.hits[0].episode_id == written.episode_ids[0] and "Alvarez" in found.hits[0].text
        memory = client.get_memory(written.episode_ids[0])
        assert memory.id == written.episode_ids[0] and memory.layer == "hot"
        assert client.whoami()["tenant"] == "client-team"


def test_the_async_client_does_the_same(live_server, team):
    async def run():
        async with AsyncMemoryClient(live_server.url, team.secret) as client:
            written = await client.add_turns("chat-2", CONVERSATION, user_id="mum")
            found = await client.search("violin lessons", user_id="mum", limit=3)
            return written, found

    written, found = asyncio.run(run())
    assert found.hits and found.hits[0].episode_id == written.episode_ids[0]


def test_key_and_url_from_the_environment(live_server, team, monkeypatch):
    monkeypatch.setenv("MEMORY_URL", live_server.url)
    monkeypatch.setenv("MEMORY_API_KEY", team.secret)
    with MemoryClient() as client:
        assert client.add_memory("Mia is allergic to cats", user_id="dad").layer == "hot"
    monkeypatch.delenv("MEMORY_API_KEY")
    with pytest.raises(ValueError, match="MEMORY_API_KEY"):
        MemoryClient()


def test_errors_are_typed(live_server, team, outsider):
    with MemoryClient(live_server.url, team.secret) as client:
        with pytest.raises(NotFound) as missing:
            client.get_memory("01ARZ3NDEKTSV4RRFFQ69G5FAV")
        assert missing.value.status == 404 and missing.value.code == "not_found"
        mine = client.add_memory("The garage code is 4711", user_id="dad")
    with MemoryClient(live_server.url, outsider.secret) as other:  # another tenant sees nothing of it
        with pytest.raises(NotFound):
            other.get_memory(mine.id)
        with pytest.raises(Forbidden):
            other.stats()  # a read/write key
    with MemoryClient(live_server.url, "nope.nothing") as stranger, pytest.raises(Unauthenticated):
        stranger.whoami()
    with MemoryClient(live_server.url, team.secret) as client:
        confirm = client.erase_user("gone")["confirm"]
        client.erase_user("gone", confirm=confirm)
        with pytest.raises(Gone):
            client.add_memory("back?", user_id="gone")


def test_rate_limits_are_waited_out_only_where_retrying_is_safe(live_server, team):
    with override_settings(MEMORY={**settings.MEMORY, "RATE_LIMIT": "2/s"}):
        with MemoryClient(live_server.url, team.secret, retries=0) as client:
            with pytest.raises(RateLimited) as limited:
                for _ in range(5):
                    client.whoami()
            assert limited.value.retry_after is not None and limited.value.retry_after > 0
        with MemoryClient(live_server.url, team.secret, retries=3) as client:
            for _ in range(5):
                client.whoami()  # a read: waited out


def test_unreachable_is_unavailable(team):
    with MemoryClient("http://127.0.0.1:9", team.secret, retries=1, timeout=1) as client:
        with pytest.raises(Unavailable) as down:
            client.whoami()
        assert down.value.status == 0


def test_pages(live_server, team):
    with MemoryClient(live_server.url, team.secret) as client:
        made = {client.add_memory(f"fact {i}", user_id="pager").id for i in range(5)}
        assert {m.id for m in client.iter_memories(user_id="pager", limit=2)} == made


# --- the schema is the source of truth ----------------------------------------------------------------
def _called_paths() -> set[tuple[str, str]]:
    """(method, path) of the request each client method sends, recorded by a transport that answers
    nothing (it checks which endpoints the client names; the tests above check what they do)."""
    seen: set[tuple[str, str]] = set()

    def record(request: httpx.Request) -> httpx.Response:
        seen.add((request.method, request.url.path.removeprefix("/api/v1")))
        return httpx.Response(200, json={"results": [], "turns": []})

    client = MemoryClient("http://platform.invalid", "k.k", retries=0)
    client._http = httpx.Client(
        base_url="http://platform.invalid/api/v1", transport=httpx.MockTransport(record)
    )
    for name, function in inspect.getmembers(_Api, inspect.isfunction):
        if name.startswith("_"):
            continue
        args = [
            [] if p.name == "turns" else b"{}" if p.name == "body" else "01ARZ3NDEKTSV4RRFFQ69G5FAV"
            for p in inspect.signature(function).parameters.values()
            if p.name != "self" and p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD
        ]
        # The recorded answer is empty, so parsing it may fail: the request was sent, which counts here.
        with contextlib.suppress(KeyError, TypeError, ValueError):
            getattr(client, name)(*args)
    return seen


def test_every_endpoint_of_the_schema_has_a_client_method(client):
    schema = json.loads(client.get("/api/schema/?format=json").content)
    called = _called_paths()
    missing = []
    for path, operations in schema["paths"].items():
        if not path.startswith("/api/v1/"):
            continue
        pattern = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path.removeprefix("/api/v1")) + "$")
        for method in operations:
            if method.upper() not in {"GET", "POST", "PUT", "PATCH", "DELETE"}:
                continue
            if not any(m == method.upper() and pattern.match(p) for m, p in called):
                missing.append(f"{method.upper()} {path}")
    assert missing == [], f"endpoints without a client method: {missing}"


def test_the_review_queue_through_the_client(live_server, team):
    from lifecycle.models import Candidate

    with MemoryClient(live_server.url, team.secret) as client:
        a = client.add_memory("Prefers tea in the morning", user_id="dad")
        b = client.add_memory("Likes tea in the mornings", user_id="dad")
        proposal = Candidate.objects.create(
            tenant=team.tenant,
            kind="merge",
            episode_id=pk(a.id),
            other_id=pk(b.id),
            similarity=0.97,
            score=0.1,
        )
        [queued] = client.candidates()["results"]
        assert queued["id"] == proposal.public_id and queued["memory"]["id"] == a.id
        assert queued["other"] is not None and queued["other"]["text"] == "Likes tea in the mornings"
        assert client.reject_candidate(queued["id"])["status"] == "rejected"
        assert client.candidates()["results"] == []
        with pytest.raises(NotFound):
            client.approve_candidate("01JZZZZZZZZZZZZZZZZZZZZZZZ")
