"""The hot index: one per tenant; the KNN filter policy; replies read the same over RESP2 and RESP3."""

import pytest
import redis
from django.conf import settings

from episodes.stores import keys
from episodes.stores.hot import HotFilters, HotStore, hot_store

from ..conftest import Caller, unit_vectors

pytestmark = pytest.mark.django_db(transaction=True)


def ingest(caller, session, vectors):
    body = caller.post(
        "/api/v1/turns",
        {
            "session_id": session,
            "turns": [
                {
                    "role": "user",
                    "text": f"ledger entry {i} about apples",
                    "vector": v.tolist(),
                    "episode_boundary": True,
                }
                for i, v in enumerate(vectors)
            ],
        },
    )
    assert body.status_code == 201, body.json()


def turn_ids(hits):
    return [h.turn_id for h in hits]


def test_a_tenants_whole_hot_tier_walks_the_vector_index_and_narrowed_searches_score_exactly(provided):
    assert HotStore._hybrid_policy(HotFilters()) == "BATCHES"
    for narrowed in (
        HotFilters(session_id="s1"),
        HotFilters(kinds=("note",)),
        HotFilters(tags=("x",)),
        HotFilters(occurred_from=0.0),
        HotFilters(episode_ids=(1,)),
    ):
        assert HotStore._hybrid_policy(narrowed) == "ADHOC_BF"

    vectors = unit_vectors(30, seed=11)
    ingest(provided, "s1", vectors)
    tenant_hex = provided.tenant.id.hex
    store = HotStore()
    ranked = {}
    for policy in ("BATCHES", "ADHOC_BF"):
        store._hybrid_policy = lambda *_, p=policy: p  # type: ignore[method-assign]
        ranked[policy], _ = store.search(tenant_hex, vector=vectors[3], text=None, filters=HotFilters(), k=10)
    # Both policies rank alike (the default FLAT index is exact either way).
    assert turn_ids(ranked["BATCHES"]) == turn_ids(ranked["ADHOC_BF"]) and len(ranked["BATCHES"]) == 10
    assert ranked["BATCHES"][0].score == pytest.approx(1.0, abs=1e-5)


def test_each_tenant_has_its_own_index_and_its_own_bm25_statistics(provided):
    ingest(provided, "s1", unit_vectors(6, seed=21))
    tenant_hex = provided.tenant.id.hex

    def scores():
        _, by_text = hot_store().search(
            tenant_hex, vector=None, text="ledger apples", filters=HotFilters(), k=10
        )
        return [(h.turn_id, h.score) for h in by_text]

    before = scores()
    assert len(before) == 6
    # Another tenant's many documents with the same words change nothing here.
    other = Caller("other-co", embedder="provided")
    ingest(other, "s1", unit_vectors(40, seed=22))
    assert scores() == before
    names = {
        n.decode() if isinstance(n, bytes) else n for n in hot_store().client.execute_command("FT._LIST")
    }
    algorithm = str(settings.MEMORY["HOT_INDEX_ALGORITHM"])
    assert {keys.index_name(tenant_hex, algorithm), keys.index_name(other.tenant.id.hex, algorithm)} <= names
    hits, _ = hot_store().search(
        tenant_hex, vector=unit_vectors(6, seed=21)[0], text=None, filters=HotFilters(), k=50
    )
    assert len(hits) == 6 and all(h.doc_id.startswith(keys.tenant_tag(tenant_hex)) for h in hits)

    hot_store().drop_tenant(other.tenant.id.hex)
    names = {
        n.decode() if isinstance(n, bytes) else n for n in hot_store().client.execute_command("FT._LIST")
    }
    assert keys.index_name(other.tenant.id.hex, algorithm) not in names


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


def test_the_shared_indexes_of_earlier_versions_are_dropped(provided):
    client = hot_store().client
    for name in keys.LEGACY_INDEXES:
        client.execute_command(
            "FT.CREATE", name, "ON", "HASH", "PREFIX", "1", "mp:{", "SCHEMA", "tenant", "TAG"
        )
    HotStore().ensure_index(provided.tenant.id.hex)
    names = {n.decode() if isinstance(n, bytes) else n for n in client.execute_command("FT._LIST")}
    assert not names & set(keys.LEGACY_INDEXES)
    assert keys.index_name(provided.tenant.id.hex, str(settings.MEMORY["HOT_INDEX_ALGORITHM"])) in names
