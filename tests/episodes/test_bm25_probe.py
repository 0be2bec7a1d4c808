"""Whether the hot tier forces a collection after removing documents: only where the server's BM25
goes wrong until it collects (``episodes.stores.bm25_probe``), since each collection forks Redis
and every tenant waits while it does. On a single server and on a cluster."""

from __future__ import annotations

import uuid

import pytest

from episodes.stores.bm25_probe import WRAPPED_SCORE, top_score
from episodes.stores.hot import hot_store
from memory_platform.redis_client import on_owner_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_deployment")]


def _top_score(store, name: str) -> float:
    reply = store.client.execute_command(
        "FT.SEARCH", name, "common|rare", "WITHSCORES", "NOCONTENT", "SCORER", "BM25STD",
        "LIMIT", 0, 1, "DIALECT", 2, **on_owner_of(store.client, name),
    )  # fmt: skip
    return top_score(reply)


@pytest.fixture
def rewritten():
    """A tenant's index of ten documents sharing a word, one of them just rewritten."""
    store = hot_store()
    tenant_hex = uuid.uuid4().hex
    name = store.ensure_index(tenant_hex)
    for i in range(10):
        store.client.hset(
            f"mp:{{{tenant_hex}}}:t:{i}", mapping={"text": f"common word {'rare' if i == 3 else 'plain'}"}
        )
    store.client.delete(f"mp:{{{tenant_hex}}}:t:5")
    store.client.hset(f"mp:{{{tenant_hex}}}:t:5", mapping={"text": "common word plain"})
    yield store, tenant_hex, name
    store._idf_wraps = None  # the store is the process's: the next test measures its server again
    store.drop_tenant(tenant_hex)


def test_the_embedded_redis_is_found_to_wrap_and_the_probe_leaves_nothing(rewritten):
    store, _, _ = rewritten
    store._idf_wraps = None
    # RediSearch 2.10.5, which the embedded server loads, wraps; the probe measures it.
    assert store.idf_wraps() is True
    assert not list(store.client.scan_iter(match="mp:probe:*"))
    assert not [n for n in store.client.execute_command("FT._LIST") if b"probe" in n]


def test_the_collection_is_forced_where_bm25_wraps(rewritten):
    store, tenant_hex, name = rewritten
    assert _top_score(store, name) > WRAPPED_SCORE  # the rewrite's dead copy, not yet collected
    store._idf_wraps = True
    store.collect_garbage(tenant_hex, only_if_needed=True)
    assert _top_score(store, name) < 5


def test_no_collection_is_forced_where_bm25_clamps(rewritten):
    """A server that clamps is not forked for a collection: left to its own collector, the dead copy
    stays a moment (on this wrapping server, visibly so; a clamping one would score it about 0)."""
    store, tenant_hex, name = rewritten
    store._idf_wraps = False
    store.collect_garbage(tenant_hex, only_if_needed=True)
    assert _top_score(store, name) > WRAPPED_SCORE
    store.collect_garbage(tenant_hex)  # asked outright, it collects
    assert _top_score(store, name) < 5
