"""The hot index: one per tenant (its KNN and BM25 see the tenant's documents only), the KNN
filter policy, replies read the same over RESP2 and RESP3, feedback, restarts and upgrades."""

import time

import numpy as np
import pytest
import redis
from django.conf import settings

from episodes.scope import Scope
from episodes.stores import keys
from episodes.stores.bm25_probe import BALLAST
from episodes.stores.hot import Feedback, HotStore, _hybrid_policy, hot_store
from memory_platform.redis_client import info_field

from ..conftest import Caller, pk, unit_vectors

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_deployment")]


def ingest(caller, session, vectors):
    return ingest_texts(
        caller, session, [f"ledger entry {i} about apples" for i in range(len(vectors))], vectors
    )


def ingest_texts(caller, session, texts, vectors):
    """The turns written, by internal id (the hot index's)."""
    from episodes.models import Turn

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
    shown = [t["id"] for t in body.json()["turns"]]
    pks = dict(Turn.objects.across_tenants("test").filter(public_id__in=shown).values_list("public_id", "pk"))
    return [pks[public_id] for public_id in shown]


def turn_ids(hits):
    return [h.turn_id for h in hits]


def index_names(store):
    return set(store.index_names())


def tenant_keys(store, tenant_hex):
    """The tenant's keys, wherever they are (SCAN asks every master of a cluster)."""
    return list(store.client.scan_iter(match=keys.tenant_pattern(tenant_hex)))


def test_each_tenant_has_its_own_index_walked_by_default_and_scored_exactly_when_narrowed(provided):
    vectors = unit_vectors(30, seed=11)
    ingest(provided, "s1", vectors)
    outsider = Caller("small-co", embedder="provided")
    outsider_vectors = unit_vectors(2, seed=12)
    ingest(outsider, "s1", outsider_vectors)
    tenant_hex, outsider_hex = provided.tenant.id.hex, outsider.tenant.id.hex
    store = hot_store()
    assert {store.index_name(tenant_hex), store.index_name(outsider_hex)} <= index_names(store)
    # 30 turn documents, 30 episode documents and the ballast (bm25_probe): the outsider's are in
    # its own index.
    info = store.client.execute_command("FT.INFO", store.index_name(tenant_hex))
    assert int(info_field(info, "num_docs")) == 60 + BALLAST
    assert _hybrid_policy(Scope()) == "BATCHES"
    assert _hybrid_policy(Scope(session_id="s1")) == "ADHOC_BF"

    # Both policies rank alike (the default FLAT index is exact either way).
    walked, _, _ = store.search(
        tenant_hex, vector=vectors[3], text=None, scope=Scope(states=("active",)), k=10
    )
    exact, _, _ = store.search(tenant_hex, vector=vectors[3], text=None, scope=Scope(session_id="s1"), k=10)
    assert turn_ids(walked) == turn_ids(exact) and len(walked) == 10
    assert walked[0].score == pytest.approx(1.0, abs=1e-5)

    # The outsider sees its own turns only, nearest first, even with the tenant's own vector.
    for query in (outsider_vectors[1], vectors[3]):
        hits, _, _ = store.search(
            outsider_hex, vector=query, text="ledger apples", scope=Scope(states=("active",)), k=10
        )
        assert len(hits) == 2 and all(h.doc_id.startswith(keys.tenant_tag(outsider_hex)) for h in hits)
    assert store.count(tenant_hex) == 30 and store.count(outsider_hex) == 2
    assert len(store.episode_ids(tenant_hex)) == 30 and len(store.episode_ids(outsider_hex)) == 2

    # Dropping a tenant drops its index and documents, and nobody else's.
    store.drop_tenant(outsider_hex)
    assert store.index_name(outsider_hex) not in index_names(store)
    assert store.count(outsider_hex) == 0 and store.count(tenant_hex) == 30


def test_an_outsiders_text_does_not_move_a_tenants_bm25_scores(provided):
    ingest_texts(
        provided,
        "s1",
        ["the harbour lights at dusk", "lights and lanterns", "a quiet harbour"],
        unit_vectors(3, seed=14),
    )
    tenant_hex = provided.tenant.id.hex

    def ranking():
        _, hits, _ = hot_store().search(
            tenant_hex, vector=None, text="harbour lights", scope=Scope(states=("active",)), k=10
        )
        return [(h.turn_id, round(h.score, 6)) for h in hits]

    before = ranking()
    assert len(before) == 3
    # Many documents full of one of the words: in a shared index they would change its IDF.
    outsider = Caller("outsider-co", embedder="provided")
    ingest_texts(outsider, "s1", ["harbour harbour harbour"] * 40, unit_vectors(40, seed=15))
    assert ranking() == before


@pytest.mark.single_redis
def test_replies_read_the_same_over_resp2_and_resp3(provided):
    vectors = unit_vectors(5, seed=13)
    ingest(provided, "s1", vectors)
    tenant_hex = provided.tenant.id.hex
    found = {}
    for protocol in (2, 3):
        store = HotStore(client=redis.Redis.from_url(settings.REDIS_URL, protocol=protocol))
        found[protocol] = store.search(
            tenant_hex, vector=vectors[2], text="ledger apples", scope=Scope(states=("active",)), k=10
        )[:2]
    for by_vector, by_text in found.values():
        assert len(by_vector) == 5 and len(by_text) == 5
        assert by_vector[0].score == pytest.approx(1.0, abs=1e-5) and by_text[0].score > 0
    assert [(h.doc_id, h.episode_id, h.turn_id) for h in found[2][0]] == [
        (h.doc_id, h.episode_id, h.turn_id) for h in found[3][0]
    ]
    assert [(h.turn_id, round(h.score, 6)) for h in found[2][1]] == [
        (h.turn_id, round(h.score, 6)) for h in found[3][1]
    ]


def test_documents_of_the_shared_index_of_earlier_versions_are_found_through_the_tenants_index(provided):
    vectors = unit_vectors(25, seed=16)
    ids = ingest(provided, "s1", vectors)
    tenant_hex = provided.tenant.id.hex
    store = hot_store()
    # As an upgrade finds Redis: the documents, under the shared index of v1 only.
    store.client.execute_command("FT.DROPINDEX", store.index_name(tenant_hex))
    store.client.execute_command(
        "FT.CREATE", keys.LEGACY_INDEXES[1], "ON", "HASH", "PREFIX", "1", "mp:{", "SCHEMA", "tenant", "TAG"
    )
    store.forget_index_state()

    hits, text_hits, _ = store.search(
        tenant_hex, vector=vectors[4], text="ledger apples", scope=Scope(states=("active",)), k=30
    )
    assert hits[0].turn_id == ids[4] and {h.turn_id for h in hits} == set(ids) and len(text_hits) == 25
    names = index_names(store)
    assert keys.LEGACY_INDEXES[1] not in names and store.index_name(tenant_hex) in names
    assert store.client.get(keys.BACKFILL_MARKER) == keys.LEGACY_INDEXES[1].encode()


@pytest.mark.single_redis
def test_a_new_index_scans_the_keyspace_only_after_an_index_over_existing_documents_was_dropped(provided):
    store = hot_store()
    tenant_hex = provided.tenant.id.hex
    # A document written while the tenant had no index (as an earlier version left it).
    store.client.hset(
        keys.turn_key(tenant_hex, 1), mapping={"tenant": tenant_hex, "doctype": "turn", "state": "active"}
    )
    store.ensure_index(tenant_hex)
    assert store.count(tenant_hex) == 0  # a new tenant's index skips the keyspace scan

    store.client.execute_command("FT.DROPINDEX", store.index_name(tenant_hex))
    store.client.execute_command(
        "FT.CREATE", keys.LEGACY_INDEXES[0], "ON", "HASH", "PREFIX", "1", "mp:{", "SCHEMA", "tenant", "TAG"
    )
    store.forget_index_state()
    assert store.count(tenant_hex) == 1  # the shared index was dropped: this one scanned

    # A full rebuild indexes every tenant again; new indexes skip the scan from then on.
    from episodes.indexing import rebuild_hot

    rebuild_hot()
    assert not store.client.exists(keys.BACKFILL_MARKER)


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
    plain, text_hits, _ = store.search(
        tenant_hex, vector=query, text="zeppelin", scope=Scope(states=("active",)), k=12
    )
    assert turn_ids(text_hits) == [ids[7]]
    assert turn_ids(plain)[0] == ids[2] and turn_ids(plain).index(ids[7]) > 0

    feedback = Feedback(docs=3, weight=2.0)
    moved, moved_text, _ = store.search(
        tenant_hex, vector=query, text="zeppelin", scope=Scope(states=("active",)), k=12, feedback=feedback
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
    off, _, _ = store.search(
        tenant_hex,
        vector=query,
        text="zeppelin",
        scope=Scope(states=("active",)),
        k=12,
        feedback=Feedback(docs=0, weight=0.5),
    )
    assert turn_ids(off) == turn_ids(plain)
    no_words, none, _ = store.search(
        tenant_hex, vector=query, text="the", scope=Scope(states=("active",)), k=12, feedback=feedback
    )
    assert none == [] and turn_ids(no_words) == turn_ids(plain)
    unmatched, nothing, _ = store.search(
        tenant_hex, vector=query, text="quokka", scope=Scope(states=("active",)), k=12, feedback=feedback
    )
    assert nothing == [] and turn_ids(unmatched) == turn_ids(plain)


@pytest.mark.single_redis
def test_a_restarted_redis_ranks_text_as_before_without_dead_records_from_its_log(provided):
    from django.conf import settings

    from memory_platform.embedded.redis import collect_index_garbage
    from memory_platform.redis_client import get_redis

    # On start Redis loads its log's base snapshot, then replays the writes since: documents
    # deleted after the snapshot are indexed and deleted again, and a deleted document stays in
    # the inverted index (and in BM25's document frequencies) until collected, which start()
    # does. (RediSearch's collector skips an index with fewer than 100 deleted documents unless
    # FORK_GC_CLEAN_THRESHOLD is lowered, as the embedded server's is.)
    vectors = unit_vectors(8, seed=31)
    ingest_texts(
        provided, "s1", [f"entry {i} about apples and pears" + " pears" * i for i in range(8)], vectors
    )
    gone = ingest_texts(
        provided, "s2", [f"pears {i} and more pears" for i in range(150)], unit_vectors(150, seed=32)
    )
    tenant_hex = provided.tenant.id.hex
    # The log's base snapshot holds the documents of session s2; their deletes follow it in the log.
    client = get_redis()
    client.bgrewriteaof()
    while client.info("persistence")["aof_rewrite_in_progress"]:
        time.sleep(0.05)
    client.unlink(*[keys.turn_key(tenant_hex, t) for t in gone])
    index = hot_store().index_name(tenant_hex)
    url = settings.EMBEDDED_REDIS.url()

    def text_ranking():
        _, hits, _ = hot_store().search(
            tenant_hex, vector=None, text="apples pears", scope=Scope(states=("active",)), k=200
        )
        return [(h.turn_id, round(h.score, 6)) for h in hits]

    def collected_records():
        # On a loaded machine one forced run may leave part of the garbage to the next: collect
        # until a run finds nothing left, as a quiet server would have done by now.
        for _ in range(10):
            before, after = collect_index_garbage(url)[index]
            if before == after:
                return after
        raise AssertionError(f"the index {index} still had garbage after 10 collections")

    collected_records()
    ranking = text_ranking()
    assert len(ranking) == 8
    records = collected_records()

    server = settings.EMBEDDED_REDIS
    server.stop()
    server.start()
    assert collect_index_garbage(url)[index] == (records, records)
    assert text_ranking() == ranking


def test_a_deleted_tenants_hot_documents_and_index_go_with_it(provided):
    ingest(provided, "s1", unit_vectors(4, seed=41))
    outsider = Caller("outsider-co", embedder="provided")
    ingest(outsider, "s1", unit_vectors(3, seed=42))
    store = hot_store()
    tenant_hex, outsider_hex = provided.tenant.id.hex, outsider.tenant.id.hex
    assert len(tenant_keys(store, outsider_hex)) == 6 + BALLAST  # its ballast too (bm25_probe)

    outsider.tenant.delete()
    assert store.index_name(outsider_hex) not in index_names(store)
    assert tenant_keys(store, outsider_hex) == []
    # Nobody else's.
    assert store.count(tenant_hex) == 4 and store.index_name(tenant_hex) in index_names(store)


def test_collecting_garbage_takes_removed_documents_out_of_bm25s_statistics(provided):
    from episodes.models import Turn

    texts = [f"entry {i} about apples and pears" + " pears" * i for i in range(8)]
    ingest_texts(provided, "s1", texts, unit_vectors(8, seed=41))
    gone = ingest_texts(
        provided, "s2", [f"pears {i} and more pears" for i in range(150)], unit_vectors(150, seed=42)
    )
    tenant_hex = provided.tenant.id.hex
    store = hot_store()
    for episode_id, turn_id in (
        Turn.objects.across_tenants("test").filter(pk__in=gone).values_list("episode_id", "pk")
    ):
        store.remove_episode(tenant_hex, episode_id, [turn_id])
    # The same eight texts in a tenant that never held the others: the statistics to expect.
    fresh = Caller("fresh-co", embedder="provided")
    ingest_texts(fresh, "s1", texts, unit_vectors(8, seed=41))

    def terms(tenant_hex):
        return int(
            info_field(store.client.execute_command("FT.INFO", store.index_name(tenant_hex)), "num_terms")
        )

    def scores(tenant_hex):
        _, hits, _ = store.search(
            tenant_hex, vector=None, text="apples pears", scope=Scope(states=("active",)), k=200
        )
        return [h.score for h in hits]

    store.collect_garbage(tenant_hex)
    # The removed documents' terms are gone (158 terms before, 15 after), and with them the
    # document frequencies that put these scores 80 times too high. They stay a little higher
    # than the fresh tenant's (RediSearch seems to keep its running total of document lengths:
    # 1.4 times without the ballast, which now makes most of that total), the same for every
    # document.
    assert terms(tenant_hex) == terms(fresh.tenant.id.hex)
    ours, expected = scores(tenant_hex), scores(fresh.tenant.id.hex)
    assert len(ours) == len(expected) == 8
    assert all(e <= o < 2 * e for o, e in zip(ours, expected, strict=True))


def test_an_outdated_index_is_replaced_and_its_tenant_indexed_again(caller):
    """Indexes of the version before exact tag values hold raw values: `rebuild_hot --if-outdated`
    (make run's start) drops them with their documents and indexes the tenants from Postgres."""
    from django.core.management import call_command
    from redis.commands.search.index_definition import IndexDefinition
    from redisvl.schema import IndexSchema

    from episodes.stores import keys

    episode_id = pk(caller.post("/api/v1/memories", {"text": "old format", "user_id": "Alice"}).json()["id"])
    store = hot_store()
    tenant_hex = caller.tenant.id.hex
    store.drop_tenant(tenant_hex)
    old_name = keys.index_name(tenant_hex, "FLAT", keys.OUTDATED_BASES[0])
    schema = IndexSchema.from_dict(keys.hot_schema(tenant_hex, 384, "FLAT"))
    store.client.ft(old_name).create_index(
        fields=schema.redis_fields,
        definition=IndexDefinition(prefix=[schema.index.prefix]),
    )
    store.client.hset(
        keys.episode_key(tenant_hex, episode_id), mapping={"doctype": "episode", "user_id": "Alice"}
    )
    assert store.outdated_indexes() == [old_name]

    gone = keys.index_name("0" * 32, "FLAT", keys.OUTDATED_BASES[0])  # a deleted tenant's
    store.client.ft(gone).create_index(
        fields=schema.redis_fields, definition=IndexDefinition(prefix=["mp:{0}:"])
    )
    call_command("rebuild_hot", if_outdated=True)
    assert store.outdated_indexes() == []
    assert store.episode_ids(tenant_hex, Scope(user_id="Alice")) == {episode_id}
    assert store.episode_ids(tenant_hex, Scope(user_id="alice")) == set()
    call_command("rebuild_hot", if_outdated=True)  # nothing outdated: nothing to do


@pytest.mark.single_redis
def test_the_embedded_server_collects_an_index_once_half_its_ballast_was_removed(provided):
    from memory_platform.embedded.redis import GC_SETTINGS
    from memory_platform.redis_client import get_redis

    # The test run's Redis is the embedded server: its collector looks every 5 s, and forks for an
    # index only once it lost half its ballast's worth of documents (episodes.stores.bm25_probe).
    client = get_redis()
    running = {name: client.execute_command("FT.CONFIG", "GET", name) for name in GC_SETTINGS}
    as_set = {name: _config_value(reply, name) for name, reply in running.items()}
    assert as_set == {"FORK_GC_RUN_INTERVAL": 5, "FORK_GC_CLEAN_THRESHOLD": BALLAST // 2} == GC_SETTINGS
    # And no union is walked through the heap that can spin (docs/decisions/0066).
    reply = client.execute_command("FT.CONFIG", "GET", "UNION_ITERATOR_HEAP")
    assert _config_value(reply, "UNION_ITERATOR_HEAP") == 1000


def _config_value(reply, name: str) -> int:
    """FT.CONFIG GET's reply, a map over RESP3, a list of pairs over RESP2."""
    if isinstance(reply, dict):
        return int({k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}[name])
    return int(dict((k.decode() if isinstance(k, bytes) else k, v) for k, v in reply)[name])


def test_a_turn_arriving_in_a_long_session_rewrites_only_what_changed(provided):
    from episodes.indexing import episodes_index_hot
    from episodes.models import Turn
    from memory_platform.redis_client import info_field

    store = hot_store()
    vector = unit_vectors(1, seed=61)[0].tolist()

    def say(text):
        body = provided.post(
            "/api/v1/turns",
            {"session_id": "long", "turns": [{"role": "user", "text": text, "vector": vector}]},
        )
        assert body.status_code == 201, body.json()

    def written():
        # RediSearch numbers each document it indexes, a new one or a rewritten one alike; a
        # rewritten one leaves a dead copy that BM25 counts until it is collected.
        index = store.index_name(provided.tenant.id.hex)
        return int(info_field(store.client.execute_command("FT.INFO", index), "max_doc_id"))

    for i in range(8):
        say(f"note {i} about the orchard and its pears")
    episode_ids = set(
        Turn.objects.across_tenants("test")
        .filter(tenant=provided.tenant)
        .values_list("episode_id", flat=True)
    )
    assert len(episode_ids) == 1
    before = written()
    say("the ninth note, about quinces")
    # The new turn, the one before it (its window now reads the new one), the episode document;
    # not the episode's seven other turns.
    assert written() - before == 3
    assert episodes_index_hot(provided.tenant.pk, list(episode_ids)) == 1 and written() - before == 3
    _, hits, _ = store.search(
        provided.tenant.id.hex, vector=None, text="quinces", scope=Scope(states=("active",)), k=5
    )
    assert len(hits) == 2  # the new turn, and the one before it whose window reads it


@pytest.mark.single_redis
def test_an_embedded_server_started_by_an_earlier_release_gets_the_module_settings(provided):
    from django.conf import settings

    from memory_platform.redis_client import get_redis

    client = get_redis()
    client.execute_command("FT.CONFIG", "SET", "FORK_GC_RUN_INTERVAL", 30)
    client.execute_command("FT.CONFIG", "SET", "FORK_GC_CLEAN_THRESHOLD", 100)
    client.execute_command("FT.CONFIG", "SET", "UNION_ITERATOR_HEAP", 20)
    settings.EMBEDDED_REDIS.start()  # already running: `make run` beside a server left running
    reply = client.execute_command("FT.CONFIG", "GET", "FORK_GC_RUN_INTERVAL")
    assert _config_value(reply, "FORK_GC_RUN_INTERVAL") == 5
    reply = client.execute_command("FT.CONFIG", "GET", "FORK_GC_CLEAN_THRESHOLD")
    assert _config_value(reply, "FORK_GC_CLEAN_THRESHOLD") == BALLAST // 2
    reply = client.execute_command("FT.CONFIG", "GET", "UNION_ITERATOR_HEAP")
    assert _config_value(reply, "UNION_ITERATOR_HEAP") == 1000
