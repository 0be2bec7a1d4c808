"""What the hot tier holds against BM25 going wrong between a removal and its collection
(``episodes.stores.bm25_probe``): where the server's IDF wraps, each tenant's index holds ballast
documents, so a collection (a fork of Redis, which every tenant waits on) is needed only once half
as many documents were removed. On a single server and on a cluster."""

from __future__ import annotations

import uuid

import pytest

from episodes.stores import keys
from episodes.stores.bm25_probe import BALLAST, WRAPPED_SCORE, top_score
from episodes.stores.hot import hot_store
from memory_platform.redis_client import info_field, on_owner_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_deployment")]


def _top_score(store, name: str) -> float:
    reply = store.client.execute_command(
        "FT.SEARCH", name, "common|rare", "WITHSCORES", "NOCONTENT", "SCORER", "BM25STD",
        "LIMIT", 0, 1, "DIALECT", 2, **on_owner_of(store.client, name),
    )  # fmt: skip
    return top_score(reply)


def _info(store, name: str, field: str) -> int:
    return int(
        info_field(store.client.execute_command("FT.INFO", name, **on_owner_of(store.client, name)), field)
    )


def _write(store, tenant_hex: str, turn_ids) -> None:
    for i in turn_ids:
        text = f"common word {'rare' if i == 3 else 'plain'}"
        store.client.hset(keys.turn_key(tenant_hex, i), mapping={"text": text})


@pytest.fixture
def tenant_index():
    """A new tenant's index holding ten documents that share a word."""
    store = hot_store()
    store._idf_wraps = None
    tenant_hex = uuid.uuid4().hex
    name = store.ensure_index(tenant_hex)
    _write(store, tenant_hex, range(10))
    yield store, tenant_hex, name
    store._idf_wraps = None  # the store is the process's: the next test measures its server again
    store.drop_tenant(tenant_hex)


def test_the_embedded_redis_wraps_and_each_index_holds_ballast_against_it(tenant_index):
    store, tenant_hex, name = tenant_index
    # RediSearch 2.10.5, which the embedded server loads, wraps; the probe measures it and leaves
    # nothing behind.
    assert store.idf_wraps() is True
    assert not list(store.client.scan_iter(match="mp:probe:*"))
    assert not [n for n in store.client.execute_command("FT._LIST") if b"probe" in n]
    # The index counts the ballast among its documents; no search of the tenant's finds it.
    assert _info(store, name, "num_docs") == 10 + BALLAST
    assert store.count(tenant_hex) == 0  # no turn documents of the platform's own shape here

    # Rewritten before any collection, half the ballast's worth of documents leave the scores
    # right; without the ballast one rewrite sends them up.
    for _ in range(BALLAST // 20):
        for i in range(10):
            store.client.delete(keys.turn_key(tenant_hex, i))
            _write(store, tenant_hex, [i])
    assert _top_score(store, name) < 5
    store.client.delete(*(keys.ballast_key(tenant_hex, i) for i in range(BALLAST)))
    store.collect_garbage(tenant_hex)
    store.client.delete(keys.turn_key(tenant_hex, 5))
    _write(store, tenant_hex, [5])
    assert _top_score(store, name) > WRAPPED_SCORE


def test_ballast_is_written_again_after_the_index_went_with_its_documents(tenant_index):
    store, tenant_hex, name = tenant_index
    store.drop_tenant(tenant_hex)
    assert not list(store.client.scan_iter(match=keys.tenant_pattern(tenant_hex)))
    name = store.ensure_index(tenant_hex)
    assert _info(store, name, "num_docs") == BALLAST
    # Where BM25 clamps there is none.
    store.drop_tenant(tenant_hex)
    store._idf_wraps = False
    name = store.ensure_index(tenant_hex)
    assert _info(store, name, "num_docs") == 0


def _gc_runs(store, name: str) -> int:
    """How many times the collector ran on the index (each run forks Redis)."""
    info = store.client.execute_command("FT.INFO", name, **on_owner_of(store.client, name))
    return int(info_field(info_field(info, "gc_stats"), "total_cycles"))


def test_a_collection_asked_for_forks_redis_only_once_half_the_ballast_was_removed(tenant_index):
    store, tenant_hex, name = tenant_index
    _write(store, tenant_hex, range(10, 10 + BALLAST))
    records, runs = _info(store, name, "num_records"), _gc_runs(store, name)
    # Fewer removals than the collector's threshold: the call answers without collecting (no run,
    # no fork) and the dead copies stay, within the ballast.
    assert store.remove_episode(tenant_hex, 10_000, range(10, 10 + BALLAST // 2 - 1)) == BALLAST // 2 - 1
    store.collect_garbage(tenant_hex, only_if_needed=True)
    assert (_info(store, name, "num_records"), _gc_runs(store, name)) == (records, runs)
    # Half the ballast's worth: collected at once.
    store.remove_episode(tenant_hex, 10_000, [10 + BALLAST // 2])
    store.collect_garbage(tenant_hex, only_if_needed=True)
    assert _info(store, name, "num_records") < records and _gc_runs(store, name) == runs + 1


def test_no_collection_is_asked_for_where_bm25_clamps(tenant_index):
    """A server that clamps is left to its own collector however many documents went; asked
    outright, the store collects anyway."""
    store, tenant_hex, name = tenant_index
    store._idf_wraps = False
    _write(store, tenant_hex, range(10, 10 + BALLAST))
    records = _info(store, name, "num_records")
    store.remove_episode(tenant_hex, 10_000, range(10, 10 + BALLAST))
    store.collect_garbage(tenant_hex, only_if_needed=True)
    assert _info(store, name, "num_records") == records
    store.collect_garbage(tenant_hex)
    assert _info(store, name, "num_records") < records
