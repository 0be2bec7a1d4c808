"""The hot index's reads: the KNN filter policy follows the tenant's share of the index, and
replies read the same over RESP2 and RESP3."""

import time

import numpy as np
import pytest
import redis
from django.conf import settings

from episodes.stores import keys
from episodes.stores.hot import Feedback, HotFilters, HotStore, hot_store

from ..conftest import Caller, unit_vectors

pytestmark = pytest.mark.django_db(transaction=True)


def ingest(caller, session, vectors):
    return ingest_texts(
        caller, session, [f"ledger entry {i} about apples" for i in range(len(vectors))], vectors
    )


def ingest_texts(caller, session, texts, vectors):
    body = caller.post(
        "/api/v1/turns",
        {
            "session_id": session,
            "turns": [
                {"role": "user", "text": t, "vector": v.tolist(), "episode_boundary": True}
                for t, v in zip(texts, vectors, strict=True)
            ],
        },
    )
    assert body.status_code == 201, body.json()
    return [t["id"] for t in body.json()["turns"]]


def turn_ids(hits):
    return [h.turn_id for h in hits]


def test_a_big_tenant_walks_the_vector_index_and_small_or_narrowed_searches_score_exactly(provided):
    big_vectors = unit_vectors(30, seed=11)
    ingest(provided, "s1", big_vectors)
    small = Caller("small-co", embedder="provided")
    small_vectors = unit_vectors(2, seed=12)
    ingest(small, "s1", small_vectors)
    big_hex, small_hex = provided.tenant.id.hex, small.tenant.id.hex
    store = HotStore()
    assert store._hybrid_policy(big_hex, HotFilters()) == "BATCHES"
    assert store._hybrid_policy(big_hex, HotFilters(session_id="s1")) == "ADHOC_BF"
    assert store._hybrid_policy(small_hex, HotFilters()) == "ADHOC_BF"

    # Both policies rank the big tenant's turns alike (the default FLAT index is exact either way).
    query = big_vectors[3]
    store._hybrid_policy = lambda *_: "BATCHES"  # type: ignore[method-assign]
    walked, _ = store.search(big_hex, vector=query, text=None, filters=HotFilters(), k=10)
    store._hybrid_policy = lambda *_: "ADHOC_BF"  # type: ignore[method-assign]
    exact, _ = store.search(big_hex, vector=query, text=None, filters=HotFilters(), k=10)
    assert turn_ids(walked) == turn_ids(exact) and len(walked) == 10
    assert walked[0].score == pytest.approx(1.0, abs=1e-5)

    # The small tenant sees its own turns only, nearest first.
    hits, _ = hot_store().search(small_hex, vector=small_vectors[1], text=None, filters=HotFilters(), k=10)
    assert len(hits) == 2 and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert all(h.doc_id.startswith(keys.tenant_tag(small_hex)) for h in hits)


def test_replies_read_the_same_over_resp2_and_resp3(provided):
    vectors = unit_vectors(5, seed=13)
    ingest(provided, "s1", vectors)
    tenant_hex = provided.tenant.id.hex
    found = {}
    for protocol in (2, 3):
        store = HotStore(client=redis.Redis.from_url(settings.REDIS_URL, protocol=protocol))
        found[protocol] = store.search(
            tenant_hex, vector=vectors[2], text="ledger apples", filters=HotFilters(), k=10
        )
    for by_vector, by_text in found.values():
        assert len(by_vector) == 5 and len(by_text) == 5
        assert by_vector[0].score == pytest.approx(1.0, abs=1e-5) and by_text[0].score > 0
    assert [(h.doc_id, h.episode_id, h.turn_id) for h in found[2][0]] == [
        (h.doc_id, h.episode_id, h.turn_id) for h in found[3][0]
    ]
    assert [(h.turn_id, round(h.score, 6)) for h in found[2][1]] == [
        (h.turn_id, round(h.score, 6)) for h in found[3][1]
    ]


def test_an_index_left_under_an_earlier_name_is_dropped():
    client = hot_store().client
    client.execute_command(
        "FT.CREATE", keys.INDEX_BASE, "ON", "HASH", "PREFIX", "1", keys.KEY_PREFIX, "SCHEMA", "tenant", "TAG"
    )
    HotStore().ensure_index()
    names = {n.decode() if isinstance(n, bytes) else n for n in client.execute_command("FT._LIST")}
    assert keys.INDEX_BASE not in names
    assert keys.index_name(str(settings.MEMORY["HOT_INDEX_ALGORITHM"])) in names


def test_feedback_moves_the_knn_query_towards_the_best_text_hits_of_the_tenant_only(provided):
    vectors = unit_vectors(12, seed=21)
    texts = [f"note {i} about the garden" for i in range(12)]
    texts[7] = "we flew in a zeppelin over the lake"
    ids = ingest_texts(provided, "s1", texts, vectors)
    # An outsider holds the same word with another vector: its documents must not move the query.
    outsider = Caller("outsider-co", embedder="provided")
    outsider_vectors = unit_vectors(3, seed=22)
    ingest_texts(outsider, "s1", ["zeppelin zeppelin zeppelin"] * 3, outsider_vectors)

    tenant_hex = provided.tenant.id.hex
    store = hot_store()
    query = vectors[2]
    plain, text_hits = store.search(tenant_hex, vector=query, text="zeppelin", filters=HotFilters(), k=12)
    assert turn_ids(text_hits) == [ids[7]]
    assert turn_ids(plain)[0] == ids[2] and turn_ids(plain).index(ids[7]) > 0

    feedback = Feedback(docs=3, weight=2.0)
    moved, moved_text = store.search(
        tenant_hex, vector=query, text="zeppelin", filters=HotFilters(), k=12, feedback=feedback
    )
    assert turn_ids(moved_text) == turn_ids(text_hits)
    expected = query / np.linalg.norm(query) + 2.0 * vectors[7] / np.linalg.norm(vectors[7])
    expected /= np.linalg.norm(expected)
    # The KNN list is the one the moved vector gives: the text hit now first, then the query's own.
    assert turn_ids(moved)[:2] == [ids[7], ids[2]]
    assert moved[0].score == pytest.approx(
        float(expected @ vectors[7] / np.linalg.norm(vectors[7])), abs=1e-4
    )
    assert {h.turn_id for h in moved} <= set(ids)

    # No query words, or feedback off: the plain KNN list.
    off, _ = store.search(
        tenant_hex, vector=query, text="zeppelin", filters=HotFilters(), k=12, feedback=Feedback(docs=0)
    )
    assert turn_ids(off) == turn_ids(plain)
    no_words, none = store.search(
        tenant_hex, vector=query, text="the", filters=HotFilters(), k=12, feedback=feedback
    )
    assert none == [] and turn_ids(no_words) == turn_ids(plain)
    unmatched, nothing = store.search(
        tenant_hex, vector=query, text="quokka", filters=HotFilters(), k=12, feedback=feedback
    )
    assert nothing == [] and turn_ids(unmatched) == turn_ids(plain)


def test_a_restarted_redis_ranks_text_as_before_without_dead_records_from_its_log(provided):
    from django.conf import settings

    from memory_platform.embedded.redis import collect_index_garbage
    from memory_platform.redis_client import get_redis

    # On start Redis loads its log's base snapshot, then replays the writes since: documents
    # deleted after the snapshot are indexed and deleted again, and a deleted document stays in
    # the inverted index (and in BM25's document frequencies) until collected, which start()
    # does. (RediSearch's collector skips an index with fewer than 100 deleted documents.)
    vectors = unit_vectors(8, seed=31)
    ingest_texts(
        provided, "s1", [f"entry {i} about apples and pears" + " pears" * i for i in range(8)], vectors
    )
    gone = Caller("gone-co", embedder="provided")
    ingest_texts(gone, "s1", [f"pears {i} and more pears" for i in range(150)], unit_vectors(150, seed=32))
    # The log's base snapshot holds the outsider's documents; the deletes follow it in the log.
    client = get_redis()
    client.bgrewriteaof()
    while client.info("persistence")["aof_rewrite_in_progress"]:
        time.sleep(0.05)
    hot_store().drop_tenant(gone.tenant.id.hex)
    tenant_hex = provided.tenant.id.hex
    index = hot_store().index.name
    port = get_redis().connection_pool.connection_kwargs["port"]

    def text_ranking():
        _, hits = hot_store().search(tenant_hex, vector=None, text="apples pears", filters=HotFilters(), k=20)
        return [(h.turn_id, round(h.score, 6)) for h in hits]

    collect_index_garbage(port)
    ranking = text_ranking()
    assert len(ranking) == 8
    records = collect_index_garbage(port)[index][1]

    server = settings.EMBEDDED_REDIS
    server.stop()
    server.start()
    assert collect_index_garbage(port)[index] == (records, records)
    assert text_ranking() == ranking
