"""The LangGraph store (clients/python, extra ``langgraph``) against a real server of the test suite
(pytest-django's live server on the embedded Postgres and Redis)."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, Item, ListNamespacesOp, PutOp, SearchOp
from memory_platform_client import AsyncMemoryClient, MemoryClient
from memory_platform_client.langgraph_store import MemoryStore, item_tag

from tests.conftest import Caller

pytestmark = pytest.mark.django_db(transaction=True)

ALICE = ("alice", "memories")
FOOD = {"text": "Alice loves spicy Sichuan food, mapo tofu above all", "kind": "preference", "stars": 5}
PET = {"text": "Alice has a grey cat named Miso who sleeps on the piano", "kind": "fact", "stars": 3}


@pytest.fixture
def team(db):
    return Caller(
        "store-team", scopes=("read", "write", "admin"), embedder="tests.hashing_embedder.HashingEmbedder"
    )


@pytest.fixture
def client(live_server, team):
    with MemoryClient(live_server.url, team.secret) as client:
        yield client


@pytest.fixture
def store(client):
    return MemoryStore(client)


def count_requests(client: MemoryClient) -> list[str]:
    """The requests the client sends from now on, as "METHOD /path"."""
    sent: list[str] = []
    client._http.event_hooks["request"].append(
        lambda request: sent.append(f"{request.method} {request.url.path.removeprefix('/api/v1')}")
    )
    return sent


def test_round_trip_put_search_get_delete(store):
    store.put(ALICE, "food", FOOD)
    store.put(ALICE, "pet", PET)

    found = store.search(ALICE, query="which spicy tofu dish", limit=2)
    assert [(hit.namespace, hit.key) for hit in found][0] == (ALICE, "food")
    assert found[0].value == FOOD and found[0].score is not None and found[0].score > 0

    item = store.get(ALICE, "food")
    assert isinstance(item, Item) and (item.namespace, item.key, item.value) == (ALICE, "food", FOOD)
    assert isinstance(item.created_at, datetime) and item.created_at == item.updated_at
    assert item.created_at.tzinfo is not None

    store.delete(ALICE, "food")
    assert store.get(ALICE, "food") is None
    assert store.get(ALICE, "pet").value == PET  # only that key went
    # A forgotten memory never comes back, whether searched by its words or listed.
    assert [hit.key for hit in store.search(ALICE, query="spicy Sichuan mapo tofu")] == ["pet"]
    assert [hit.key for hit in store.search(ALICE)] == ["pet"]


def test_a_put_over_a_key_replaces_its_value(store, client):
    store.put(ALICE, "food", {"text": "Alice likes plain rice"})
    first = store.get(ALICE, "food")
    store.put(ALICE, "food", FOOD)

    now = store.get(ALICE, "food")
    assert now.value == FOOD
    assert now.created_at == first.created_at and now.updated_at > first.updated_at
    assert [(hit.key, hit.value) for hit in store.search(ALICE)] == [("food", FOOD)]
    assert all(hit.value == FOOD for hit in store.search(ALICE, query="plain rice"))
    # One live memory holds the key; the old one is forgotten.
    tag = item_tag(ALICE, "food")
    assert len(client.list_memories(kind="langgraph", tag=tag).memories) == 1
    assert len(client.list_memories(kind="langgraph", tag=tag, state="forgotten").memories) == 1


def test_the_namespace_fills_the_user_scope(store, client, live_server, team):
    store.put(("bob", "memories"), "sport", {"text": "Bob swims every morning before work"})

    (memory,) = client.list_memories(user_id="bob").memories
    assert memory.kind == "langgraph" and memory.raw["scope"]["user_id"] == "bob"
    assert memory.raw["metadata"]["langgraph"]["namespace"] == ["bob", "memories"]
    # The platform's own search of that user finds it.
    assert client.search("swims every morning", user_id="bob").hits[0].episode_id == memory.id
    assert client.list_memories(user_id="memories").memories == []

    # Another layout: ("prefs", <user>, <session>).
    other = MemoryStore(client, scopes=(None, "user_id", "session_id"))
    other.put(("prefs", "carol", "chat-7"), "tea", {"text": "Carol takes her tea without sugar"})
    (memory,) = client.list_memories(user_id="carol").memories
    assert memory.raw["scope"] == {"user_id": "carol", "agent_id": "", "session_id": "chat-7"}
    assert other.get(("prefs", "carol", "chat-7"), "tea").value["text"].startswith("Carol")

    with pytest.raises(ValueError, match="scopes"):
        MemoryStore(client, scopes=("user_id", "tenant"))


def test_list_namespaces(store):
    for namespace in [ALICE, ("alice", "prefs"), ("bob", "memories"), ("alice", "memories", "2023")]:
        store.put(namespace, "k", {"text": f"something about {namespace[0]}"})

    assert store.list_namespaces() == sorted(
        [ALICE, ("alice", "memories", "2023"), ("alice", "prefs"), ("bob", "memories")]
    )
    assert store.list_namespaces(prefix=("alice",)) == [
        ALICE,
        ("alice", "memories", "2023"),
        ("alice", "prefs"),
    ]
    assert store.list_namespaces(suffix=("memories",)) == [ALICE, ("bob", "memories")]
    assert store.list_namespaces(prefix=("*", "memories")) == [
        ALICE,
        ("alice", "memories", "2023"),
        ("bob", "memories"),
    ]
    assert store.list_namespaces(max_depth=1) == [("alice",), ("bob",)]
    assert store.list_namespaces(prefix=("alice",), limit=1, offset=1) == [("alice", "memories", "2023")]
    store.delete(("alice", "prefs"), "k")
    assert store.list_namespaces(prefix=("alice",), max_depth=2) == [ALICE]


def test_search_filters_the_values(store):
    store.put(ALICE, "food", FOOD)
    store.put(ALICE, "pet", PET)
    store.put(("alice", "archive"), "old", {"text": "Alice once kept goldfish", "kind": "fact", "stars": 1})

    def keys(**options):
        return sorted(hit.key for hit in store.search(("alice",), **options))

    assert keys() == ["food", "old", "pet"]
    assert keys(filter={"kind": "fact"}) == ["old", "pet"]
    assert keys(filter={"stars": {"$gte": 3}}) == ["food", "pet"]
    assert keys(filter={"stars": {"$gt": 1, "$lt": 5}}) == ["pet"]
    assert keys(filter={"kind": {"$ne": "fact"}}) == ["food"]
    assert keys(filter={"missing": {"$gt": 0}}) == []
    assert keys(query="a cat or a fish", filter={"kind": "fact"}) == ["old", "pet"]
    assert [hit.key for hit in store.search(ALICE, filter={"kind": "fact"})] == ["pet"]  # the prefix too
    assert len(store.search(("alice",), limit=2)) == 2 and len(store.search(("alice",), offset=2)) == 1
    with pytest.raises(ValueError, match="operators"):
        store.search(ALICE, filter={"stars": {"$in": [1]}})


def test_index_names_what_a_query_finds(store, client):
    store.put(
        ALICE, "lesson", {"title": "violin lessons on Tuesday", "body": "bring the rosin"}, index=["title"]
    )
    store.put(ALICE, "secret", {"text": "the garage code is 4711"}, index=False)

    texts = {m.raw["title"]: client.get_memory(m.id).raw["turns"][0]["text"] for m in client.iter_memories()}
    assert texts == {
        "alice/memories/lesson": "violin lessons on Tuesday",
        "alice/memories/secret": "alice/memories/secret",
    }
    # index=False: listed, never found by a query, even one the platform finds it by.
    secret = client.list_memories(tag=item_tag(ALICE, "secret")).memories[0]
    assert secret.id in {hit.episode_id for hit in client.search("alice/memories/secret").hits}
    assert "secret" not in {hit.key for hit in store.search(ALICE, query="alice/memories/secret")}
    assert [hit.key for hit in store.search(ALICE, query="garage code 4711")] == ["lesson"]
    assert sorted(hit.key for hit in store.search(ALICE)) == ["lesson", "secret"]
    assert store.get(ALICE, "secret").value == {"text": "the garage code is 4711"}


def test_each_operation_makes_few_requests(store, client):
    sent = count_requests(client)
    store.put(ALICE, "food", {"text": "rice"})
    assert sent == ["GET /memories", "POST /memories"]
    sent.clear()
    store.put(ALICE, "food", FOOD)
    assert sent[:2] == ["GET /memories", "POST /memories"] and sent[2].startswith("DELETE /memories/")
    assert len(sent) == 3
    sent.clear()
    store.get(ALICE, "food")
    assert sent == ["GET /memories"]
    sent.clear()
    store.search(ALICE, query="tofu")
    assert sent[0] == "POST /search" and sent[1].startswith("GET /memories/") and len(sent) == 2
    sent.clear()
    store.delete(ALICE, "food")
    assert sent == ["POST /forget"]


def test_an_outsider_sees_nothing_of_it(store, live_server, outsider):
    store.put(ALICE, "food", FOOD)
    with MemoryClient(live_server.url, outsider.secret) as theirs:
        other = MemoryStore(theirs)
        assert other.get(ALICE, "food") is None
        assert other.search(ALICE) == [] and other.search((), query="spicy mapo tofu") == []
        assert other.list_namespaces() == []
        other.delete(ALICE, "food")  # forgets nothing of ours
        other.put(ALICE, "food", {"text": "theirs"})
        assert other.get(ALICE, "food").value == {"text": "theirs"}
    assert store.get(ALICE, "food").value == FOOD
    assert [hit.value for hit in store.search(ALICE)] == [FOOD]


def test_the_async_api(live_server, team, client):
    async def run():
        async with AsyncMemoryClient(live_server.url, team.secret) as async_client:
            store = MemoryStore(client, async_client=async_client)
            await store.aput(ALICE, "food", FOOD)
            await store.aput(ALICE, "pet", PET)
            found = await store.asearch(ALICE, query="grey cat on the piano", limit=1)
            item = await store.aget(ALICE, "pet")
            got, searched, namespaces, deleted = await store.abatch(
                [
                    GetOp(ALICE, "food"),
                    SearchOp(("alice",), filter={"kind": "preference"}),
                    ListNamespacesOp(),
                    PutOp(ALICE, "food", None),
                ]
            )
            gone = await store.aget(ALICE, "food")
            return found, item, got, searched, namespaces, deleted, gone

    found, item, got, searched, namespaces, deleted, gone = asyncio.run(run())
    assert [hit.key for hit in found] == ["pet"] and found[0].score is not None
    assert item.value == PET and got.value == FOOD
    assert [hit.key for hit in searched] == ["food"] and namespaces == [ALICE]
    assert deleted is None and gone is None


def test_without_an_async_client_the_async_api_runs_in_a_thread(store):
    async def run():
        await store.aput(ALICE, "food", FOOD)
        return await store.aget(ALICE, "food")

    assert asyncio.run(run()).value == FOOD


def test_langgraphs_namespace_rules_hold_before_any_request(store, client):
    sent = count_requests(client)
    for bad in [("alice.smith", "memories"), ("", "memories"), ("langgraph", "x"), ()]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError):  # batch checks every op before it runs one
        store.batch([PutOp(ALICE, "ok", {"text": "x"}), PutOp(("a.b",), "k", {"text": "x"})])
    with pytest.raises(NotImplementedError):
        store.put(ALICE, "k", {"text": "x"}, ttl=5)
    assert sent == []
