"""The MCP server as agents' tools reach it: the SDK's own client over stdio (a real
``manage.py mcp`` process on the test database) and over streamable HTTP (``/mcp`` on the suite's
live server). The tenant is the key's on both; an outsider's key sees nothing through MCP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Caller, manage_py_environment

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"remember", "recall", "context", "forget", "unpack"}

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def team(db):
    return Caller("mcp-team", embedder="tests.hashing_embedder.HashingEmbedder")


@pytest.fixture
def stranger(db):
    return Caller("mcp-stranger", embedder="tests.hashing_embedder.HashingEmbedder")


def _environment(secret: str | None) -> dict[str, str]:
    return manage_py_environment(**({"MEMORY_API_KEY": secret} if secret is not None else {}))


def stdio(secret: str) -> Client:
    command = StdioServerParameters(
        command=sys.executable, args=["manage.py", "mcp"], env=_environment(secret), cwd=str(ROOT)
    )
    return Client(command, read_timeout_seconds=60)


def over_http(url: str, secret: str, mode: str = "auto") -> tuple[Client, httpx2.AsyncClient]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=60)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode), http


def answer(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def text(result) -> str:
    """A tool's answer that is text (``context``)."""
    assert not result.is_error, result.content[0].text
    return result.content[0].text


def error(result) -> str:
    assert result.is_error
    return result.content[0].text


async def remember_then_recall(client: Client, outsider: Client) -> None:
    """What both transports must do."""
    listed = await client.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    for tool in listed.tools:
        assert tool.description and tool.input_schema["type"] == "object"
    tools = {t.name: t for t in listed.tools}
    assert tools["recall"].annotations.read_only_hint and tools["forget"].annotations.destructive_hint
    recall_schema = tools["recall"].input_schema
    assert recall_schema["required"] == ["query"] and "description" in recall_schema["properties"]["query"]

    written = answer(
        await client.call_tool(
            "remember",
            {
                "session_id": "trip",
                "user_id": "rosa",
                "turns": [
                    {"role": "user", "text": "We booked the ferry to Hydra for the ninth of June."},
                    {"role": "assistant", "text": "Noted: ferry to Hydra on 9 June."},
                ],
            },
        )
    )
    assert written["searchable"] and len(written["turn_ids"]) == 2
    (memory_id,) = written["memory_ids"]
    found = answer(await client.call_tool("recall", {"query": "ferry Hydra", "user_id": "rosa"}))
    assert found["results"][0]["episode_id"] == memory_id
    assert "ferry to Hydra for the ninth of June" in found["results"][0]["text"]
    context = text(await client.call_tool("context", {"query": "ferry", "user_id": "rosa"}))
    assert "Hydra" in context and memory_id not in context
    named = text(await client.call_tool("context", {"query": "ferry", "user_id": "rosa", "ids": True}))
    assert "Hydra" in named and memory_id in named
    # The answer is the context's text within its budget (about four characters a token), no JSON.
    for budget in (60, 300):
        small = text(
            await client.call_tool("context", {"query": "ferry", "user_id": "rosa", "max_tokens": budget})
        )
        assert 0 < len(small) <= 4 * budget and not small.lstrip().startswith("{")

    # Another tenant's key: nothing found, nothing reachable by id.
    assert answer(await outsider.call_tool("recall", {"query": "ferry Hydra"}))["results"] == []
    assert "Hydra" not in text(await outsider.call_tool("context", {"query": "ferry"}))
    for tool in ("unpack", "forget"):
        assert "404" in error(await outsider.call_tool(tool, {"memory_id": memory_id}))
    assert answer(await client.call_tool("recall", {"query": "ferry Hydra"}))["results"]  # still there

    # A fact; a refusal comes back as the API's message, for the model to correct its call.
    fact = answer(await client.call_tool("remember", {"fact": "Rosa gets seasick on small boats."}))
    assert fact["kind"] == "fact"
    refused = error(await client.call_tool("remember", {"turns": [{"role": "user", "text": "hi"}]}))
    assert "session_id" in refused
    refused = error(
        await client.call_tool("remember", {"session_id": "s", "turns": [{"role": "user", "text": " "}]})
    )
    assert "400" in refused and "text is empty" in refused

    forgotten = answer(await client.call_tool("forget", {"memory_id": fact["memory_id"]}))
    assert forgotten["state"] == "forgotten"
    found = answer(await client.call_tool("recall", {"query": "seasick small boats"}))
    assert fact["memory_id"] not in {r["episode_id"] for r in found["results"]}


def test_over_stdio(team, stranger):
    async def run():
        async with stdio(team.secret) as client, stdio(stranger.secret) as outsider:
            await remember_then_recall(client, outsider)

    asyncio.run(run())


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_over_http_on_the_web_server(live_server, team, stranger, mode):
    """Both eras of the protocol: 2026-07-28's single exchanges, and the initialize handshake."""

    async def run():
        client, http = over_http(live_server.url, team.secret, mode)
        outsider, other_http = over_http(live_server.url, stranger.secret, mode)
        async with http, other_http, client, outsider:
            await remember_then_recall(client, outsider)

    asyncio.run(run())


def test_http_needs_a_key_and_a_scope_for_each_tool(live_server, team):
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28"}
    for authorization in (None, "Bearer nope.nothing"):
        sent = {**headers, **({"Authorization": authorization} if authorization else {})}
        refused = httpx.post(f"{live_server.url}/mcp", json=message, headers=sent)
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Bearer")
    # No event stream to open: the transport is stateless.
    assert (
        httpx.get(f"{live_server.url}/mcp", headers={"Authorization": f"Bearer {team.secret}"}).status_code
        == 405
    )

    reader = Caller("reader", scopes=("read",), tenant=team.tenant)

    async def run():
        client, http = over_http(live_server.url, reader.secret)
        async with http, client:
            refused = error(await client.call_tool("remember", {"fact": "read keys do not write"}))
            assert "403" in refused and "write" in refused
            assert answer(await client.call_tool("recall", {"query": "anything"}))["results"] == []

    asyncio.run(run())
    assert not team.get("/api/v1/memories").json()["results"]


def _mcp(*, secret: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "mcp"],
        cwd=ROOT,
        env=_environment(secret),
        input="",
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_stdio_refuses_to_start_without_a_usable_key(team):
    missing = _mcp(secret=None)
    assert missing.returncode == 1 and "set MEMORY_API_KEY" in missing.stderr and missing.stdout == ""
    wrong = _mcp(secret="nope.nothing")
    assert wrong.returncode == 1 and "MEMORY_API_KEY was refused: 401" in wrong.stderr
    assert wrong.stdout == ""  # stdout is the protocol's alone


def test_a_memory_id_is_read_as_an_id_before_any_path_is_built(live_server, team):
    """An id pasted into a path as it came could name another operation: ``<id>/anchor`` in
    ``forget`` would unpin the memory and report success."""
    pinned = team.post("/api/v1/memories", {"text": "Rosa's passport expires in May."}).json()["id"]
    assert team.post(f"/api/v1/memories/{pinned}/anchor").status_code == 200
    lost = team.post("/api/v1/memories", {"text": "The spare key is under the blue pot."}).json()["id"]
    bad_ids = [
        f"{pinned}/anchor",
        f"{pinned}/",
        f"{pinned}?depth=deep",
        "../tenant-data",
        f"x/../{pinned}",
        "",
    ]

    async def run():
        client, http = over_http(live_server.url, team.secret)
        async with http, client:
            for bad in bad_ids:
                for tool in ("forget", "unpack"):
                    refused = error(await client.call_tool(tool, {"memory_id": bad}))
                    assert "is not a memory's id" in refused and "nothing was done" in refused, (tool, bad)
            # A good id, in any case, still does what it says.
            assert (
                answer(await client.call_tool("forget", {"memory_id": lost.lower()}))["state"] == "forgotten"
            )
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "pattern" in tools["forget"].input_schema["properties"]["memory_id"]

    asyncio.run(run())
    memory = team.get(f"/api/v1/memories/{pinned}").json()
    assert memory["anchor"] is True and memory["state"] == "active" and memory["layer"] == "hot"


def test_http_answers_every_refusal_in_json(live_server, team):
    url = f"{live_server.url}/mcp"
    message = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    headers = {
        "Authorization": f"Bearer {team.secret}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
    }
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        sent = {**headers, **({"Content-Type": content_type} if content_type else {})}
        refused = httpx.post(url, content=message, headers=sent)
        assert refused.status_code == 415, (content_type, refused.text)
        assert refused.headers["Content-Type"] == "application/json"
        assert refused.json()["error"]["code"] == "unsupported_media_type"
    # Not JSON at all, sent as JSON: the protocol's parse error, in JSON too.
    broken = httpx.post(url, content="hello", headers={**headers, "Content-Type": "application/json"})
    assert broken.status_code == 400 and broken.json()["error"]["code"] == -32700


def test_recall_of_the_query_that_froze_redis_answers_at_once(live_server, team):
    """``recall`` reaches search through the REST API, so a query that once froze the shared Redis
    (docs/decisions/0037) answers within a second through MCP too, and Redis still answers."""
    import time

    from memory_platform.redis_client import get_redis

    team.post("/api/v1/memories", {"text": "我们去日本东京旅行 über Kyoto"})

    async def run():
        client, http = over_http(live_server.url, team.secret)
        async with http, client:
            started = time.perf_counter()
            found = answer(await client.call_tool("recall", {"query": "ü日本 " * 30}))
            return time.perf_counter() - started, found

    took, found = asyncio.run(run())
    assert took < 1.0 and found["results"]
    started = time.perf_counter()
    assert get_redis(quick=True).ping() and time.perf_counter() - started < 0.1
