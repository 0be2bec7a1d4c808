from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings

from episodes.indexing import hot_remove
from episodes.models import Episode, Turn
from episodes.stores.hot import hot_store
from memory_platform.redis_client import get_redis
from retrieval.usage import recorder
from tests.conftest import pk, turn_pk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_deployment")]

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def turns(caller, session, texts, *, user="u1", agent="a1", at=T0, boundary=True):
    body = caller.post(
        "/api/v1/turns",
        {
            "session_id": session,
            "user_id": user,
            "agent_id": agent,
            "turns": [
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "text": t,
                    "occurred_at": (at + timedelta(minutes=i)).isoformat(),
                    "episode_boundary": boundary and i == 0,
                }
                for i, t in enumerate(texts)
            ],
        },
    )
    assert body.status_code == 201, body.json()
    return body.json()


def search(caller, query, **extra):
    response = caller.post("/api/v1/search", {"query": query, "view": "full", **extra})
    assert response.status_code == 200, response.json()
    return response.json()


def pack(episode_id, layer):
    """Move an episode (named by its public or its internal id) to warm or cold by hand (the
    lifecycle tick does this for real)."""
    episode = Episode.objects.across_tenants("test").get(
        **{"public_id" if isinstance(episode_id, str) else "pk": episode_id}
    )
    episode_id = episode.pk
    text = " ".join(
        Turn.objects.across_tenants("test").filter(episode=episode).values_list("text", flat=True)
    )
    fields = {"layer": layer, "summary": text[:200], "key_points": [text[:100]], "search_text": text}
    if layer == "cold":
        fields.update(headline=text[:100], keywords=["packed"], search_text=text[:100])
    Episode.objects.across_tenants("test").filter(pk=episode_id).update(**fields)
    hot_remove(episode)


@pytest.fixture
def corpus(caller):
    a = turns(
        caller,
        "trip",
        [
            "I booked a flight to Lisbon for the conference",
            "Great, which hotel?",
            "The hotel is near the river in Alfama",
        ],
    )
    b = turns(
        caller,
        "cooking",
        ["My sourdough starter died again", "Feed it twice a day with rye flour"],
        user="u2",
        at=T0 + timedelta(days=10),
    )
    memory = caller.post(
        "/api/v1/memories",
        {"text": "Allergic to peanuts", "kind": "profile", "tags": ["health"], "user_id": "u1"},
    ).json()
    return {
        "trip": a["episode_ids"][0],
        "cooking": b["episode_ids"][0],
        "memory": memory["id"],
        "trip_turns": [t["id"] for t in a["turns"]],
    }


def ids(body):
    return [r["episode_id"] for r in body["results"]]


def test_hot_hits_carry_their_matched_turns_and_deep_ones_every_turn(caller, corpus):
    body = search(caller, "which hotel near the river in Lisbon", explain=True)
    top = body["results"][0]
    assert top["episode_id"] == corpus["trip"]
    assert top["layer"] == "hot" and body["degraded"] is False
    assert top["matched_turn_ids"][0] in corpus["trip_turns"]
    assert top["matched_turn_ids"][0] in [t["id"] for t in top["turns"]]
    assert top["turn_count"] == 3 and top["expand"] == f"/api/v1/memories/{corpus['trip']}"
    assert "turn_ids" not in top
    assert {"vector_rank", "text_rank", "rrf", "recency", "frequency", "anchor", "relevance"} <= set(
        top["explain"]
    )
    # The best turn is named as the answer names turns: by its public id.
    assert top["explain"]["best_turn_id"] == top["matched_turn_ids"][0]
    deep = search(caller, "which hotel near the river in Lisbon", depth="deep")["results"][0]
    assert deep["turn_ids"] == corpus["trip_turns"] and "snippet" not in deep
    assert [t["id"] for t in deep["turns"]] == corpus["trip_turns"]


def test_every_filter(caller, corpus):
    assert ids(search(caller, "food", user_id="u2")) == [corpus["cooking"]]
    assert corpus["cooking"] not in ids(search(caller, "sourdough", user_id="u1"))
    assert ids(search(caller, "anything", agent_id="nobody")) == []
    assert set(ids(search(caller, "flight", session_id="trip"))) == {corpus["trip"]}
    assert ids(search(caller, "allergy", kinds=["profile"])) == [corpus["memory"]]
    assert ids(search(caller, "allergy", tags=["health"])) == [corpus["memory"]]
    assert ids(search(caller, "allergy", tags=["nope"])) == []
    late = search(
        caller,
        "bread",
        occurred_from=(T0 + timedelta(days=5)).isoformat(),
        occurred_to=(T0 + timedelta(days=20)).isoformat(),
    )
    assert ids(late) == [corpus["cooking"]]
    early = search(caller, "bread flight", occurred_to=(T0 + timedelta(days=1)).isoformat())
    assert corpus["cooking"] not in ids(early) and corpus["trip"] in ids(early)
    pack(corpus["cooking"], "warm")
    assert ids(search(caller, "sourdough", layers=["warm"])) == [corpus["cooking"]]
    assert corpus["cooking"] not in ids(search(caller, "sourdough", layers=["hot"]))
    Episode.objects.across_tenants("test").filter(public_id=corpus["trip"]).update(state="dormant")
    hot_store().update_episode_fields(
        Episode.objects.across_tenants("test").get(public_id=corpus["trip"]),
        [turn_pk(t) for t in corpus["trip_turns"]],
        state="dormant",
    )
    # Dormant is found by default (ranked lower); `include_dormant: false` asks for active ones only.
    assert corpus["trip"] in ids(search(caller, "Lisbon hotel"))
    assert corpus["trip"] not in ids(search(caller, "Lisbon hotel", include_dormant=False))


def test_limit_and_validation(caller, corpus):
    assert len(search(caller, "the", limit=1)["results"]) <= 1
    assert caller.post("/api/v1/search", {"query": ""}).status_code == 400
    assert caller.post("/api/v1/search", {"query": "x", "layers": ["lukewarm"]}).status_code == 400
    assert caller.post("/api/v1/search", {"query": "x", "limit": 0}).status_code == 400
    assert caller.post("/api/v1/search", {"query": "x", "vector": [1.0, 2.0]}).status_code == 400
    # A window that ends before it starts is well formed, and empty.
    reversed_window = caller.post(
        "/api/v1/search",
        {"query": "the", "occurred_from": "2026-02-01T00:00:00Z", "occurred_to": "2026-01-01T00:00:00Z"},
    )
    assert reversed_window.status_code == 200 and reversed_window.json()["results"] == []


def test_session_isolation(caller):
    turns(caller, "s-one", ["We chose PostgreSQL for the billing service"])
    turns(caller, "s-two", ["We chose PostgreSQL for the analytics service"])
    body = search(caller, "PostgreSQL service", session_id="s-one")
    assert {r["scope"]["session_id"] for r in body["results"]} == {"s-one"}


def test_warm_and_cold_hits_are_shaped_by_layer(caller, corpus):
    pack(corpus["trip"], "warm")
    pack(corpus["cooking"], "cold")
    warm = search(caller, "Lisbon conference flight", layers=["warm"])["results"][0]
    assert warm["layer"] == "warm" and warm["partial"] is True and "summary" in warm
    # Found through a packed turn: that turn shows beside the packed shape, alone.
    assert {t["id"] for t in warm["turns"]} == set(warm["matched_turn_ids"])
    assert warm["snippet"] is (len(warm["turns"]) < warm["turn_count"])  # a turn left out, or none
    assert "I booked a flight to Lisbon for the conference" in [t["text"] for t in warm["turns"]]
    deep = search(caller, "Lisbon conference flight", layers=["warm"], depth="deep")["results"][0]
    assert deep["turn_ids"] == corpus["trip_turns"]
    cold = search(caller, "sourdough starter", layers=["cold"])["results"][0]
    assert (
        cold["layer"] == "cold"
        and cold["index_only"] is True
        and "headline" in cold
        and "packed" in cold["tags"]
    )


def test_access_is_recorded_without_read_modify_write(caller, corpus):
    before = Episode.objects.across_tenants("test").get(public_id=corpus["trip"])
    search(caller, "Lisbon hotel")
    search(caller, "Lisbon hotel")
    recorder.flush()  # the API queues its uses for the background writer
    after = Episode.objects.across_tenants("test").get(public_id=corpus["trip"])
    assert after.access_count == before.access_count + 2
    assert after.version >= before.version + 2


def test_deep_unpack_of_a_cold_episode_returns_every_turn_and_puts_it_back_in_hot(caller, corpus):
    pack(corpus["trip"], "cold")
    assert pk(corpus["trip"]) not in hot_store().episode_ids(caller.tenant.id.hex)
    body = caller.post(f"/api/v1/memories/{corpus['trip']}/unpack").json()
    assert body["unpacked_from"] == "cold" and body["layer"] == "hot"
    assert [t["id"] for t in body["turns"]] == corpus["trip_turns"]
    assert pk(corpus["trip"]) in hot_store().episode_ids(caller.tenant.id.hex)
    episode = Episode.objects.across_tenants("test").get(public_id=corpus["trip"])
    assert episode.restored_at is not None and episode.headline  # the packed copy is kept


def test_get_depth_deep_unpacks_a_warm_episode(caller, corpus):
    pack(corpus["cooking"], "warm")
    body = caller.get(f"/api/v1/memories/{corpus['cooking']}", {"depth": "deep"}).json()
    assert body["layer"] == "hot" and len(body["turns"]) == 2
    shallow = search(caller, "sourdough", layers=["hot"])
    assert corpus["cooking"] in ids(shallow)


@pytest.mark.single_redis
def test_degraded_search_with_redis_stopped(caller, corpus):
    server = settings.EMBEDDED_REDIS
    server.stop()
    try:
        body = search(caller, "hotel near the river in Lisbon")
    finally:
        server.start()
        get_redis().connection_pool.disconnect()
    assert body["degraded"] is True
    assert body["results"][0]["episode_id"] == corpus["trip"]
    assert body["results"][0]["matched_turn_ids"]
    assert search(caller, "Lisbon")["degraded"] is False


def test_activate_context_and_feedback(caller, corpus):
    for i in range(5):
        caller.post("/api/v1/memories", {"text": f"rule {i}: be concise", "kind": "instruction"})
    body = caller.post("/api/v1/activate", {"kind": "instruction"}).json()
    assert len(body["results"]) == 3  # activation_limit
    assert {r["kind"] for r in body["results"]} == {"instruction"}
    ranked = caller.post("/api/v1/activate", {"kind": "profile", "query": "peanut allergy"}).json()
    assert ids(ranked) == [corpus["memory"]]

    caller.post(f"/api/v1/memories/{corpus['memory']}/anchor")
    ctx = caller.post(
        "/api/v1/context", {"session_id": "trip", "query": "bread baking", "max_tokens": 400}
    ).json()
    assert ctx["sections"]["anchors"][0]["episode_id"] == corpus["memory"]
    assert ctx["sections"]["session"][0]["episode_id"] == corpus["trip"]
    assert corpus["cooking"] in [x["episode_id"] for x in ctx["sections"]["relevant"]]
    assert "Allergic to peanuts" in ctx["text"] and ctx["tokens"] <= 400
    tight = caller.post("/api/v1/context", {"session_id": "trip", "query": "bread", "max_tokens": 50}).json()
    assert tight["tokens"] <= 50

    response = caller.post("/api/v1/feedback", {"used": [corpus["trip"]], "unused": [corpus["cooking"]]})
    assert response.status_code == 200
    assert caller.post("/api/v1/feedback", {"used": [999999]}).status_code == 404


def test_context_follows_links_and_counts_a_traversal(caller, corpus):
    caller.post(
        f"/api/v1/memories/{corpus['cooking']}/links", {"target_id": corpus["memory"], "kind": "references"}
    )
    before = Episode.objects.across_tenants("test").get(public_id=corpus["memory"])
    ctx = caller.post(
        "/api/v1/context", {"query": "sourdough starter rye flour", "max_tokens": 2000, "limit": 1}
    ).json()
    assert [x["episode_id"] for x in ctx["sections"]["relevant"]] == [corpus["cooking"]]
    assert [x["episode_id"] for x in ctx["sections"]["linked"]] == [corpus["memory"]]
    assert "Linked memories" in ctx["text"]
    after = Episode.objects.across_tenants("test").get(public_id=corpus["memory"])
    assert after.traverse_count == before.traverse_count + 1
    assert after.access_count == before.access_count


def test_warm_and_cold_are_searched_only_for_tenants_holding_packed_episodes(caller, corpus):
    from episodes.stores import archive

    from ..conftest import Caller

    outsider = Caller("outsider-co")
    mine = turns(outsider, "trip", ["I booked a flight to Lisbon as well"])["episode_ids"]
    assert archive.layers_version_if_any(caller.tenant, ("warm", "cold")) is None

    pack(corpus["trip"], "warm")
    assert archive.layers_version_if_any(caller.tenant, ("warm", "cold")) is not None
    assert archive.layers_version_if_any(caller.tenant, ("cold",)) is None
    assert archive.layers_version_if_any(outsider.tenant, ("warm", "cold")) is None
    # Found the moment it is packed (nothing about it is cached), and never by the outsider.
    found = search(caller, "Lisbon conference flight")["results"]
    assert (found[0]["episode_id"], found[0]["layer"]) == (corpus["trip"], "warm")
    assert ids(search(outsider, "Lisbon conference flight")) == mine


def test_what_a_search_reads_first_is_one_statement_and_the_tenants_own(caller, corpus):
    """The policy, whether anything is packed and the hot episodes the index missed are read in one
    statement, each value the tenant's own (an outsider's packed and stale episodes are not)."""
    from django.db import connection

    from episodes.stores import archive, rows
    from lifecycle.models import MemoryPolicy, read_policy
    from retrieval.services import _preamble

    from ..conftest import Caller

    outsider = Caller("outsider-preamble")
    theirs = turns(outsider, "trip", ["I booked a flight to Lisbon as well"])["episode_ids"]
    pack(theirs[0], "warm")
    Episode.objects.across_tenants("test").filter(public_id=theirs[0]).update(layer="hot", needs_reindex=True)
    pack(corpus["trip"], "warm")
    stale = Episode.objects.across_tenants("test").get(public_id=corpus["cooking"])
    Episode.objects.across_tenants("test").filter(pk=stale.pk).update(needs_reindex=True)

    sent = []

    def count(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        policy, version, missed = _preamble(caller.tenant, ("warm", "cold"), True, None)
    assert len(sent) == 1
    assert policy == read_policy(caller.tenant)
    assert version == archive.layers_version_if_any(caller.tenant, ("warm", "cold")) is not None
    assert missed == rows.hot_index_stale(caller.tenant) == [stale.pk]
    # Nothing packed in cold, and the outsider's stale episode is not the caller's.
    assert _preamble(caller.tenant, ("cold",), True, policy)[1:] == (None, [stale.pk])
    assert _preamble(outsider.tenant, ("cold",), False, None)[1:] == (None, [])

    # A tenant whose policy row is not there yet gets it made, and the same values.
    MemoryPolicy.objects.across_tenants("test").filter(tenant=caller.tenant).delete()
    assert _preamble(caller.tenant, ("warm", "cold"), True, None) == (policy, version, [stale.pk])
    assert MemoryPolicy.objects.across_tenants("test").filter(tenant=caller.tenant).exists()


def test_the_preamble_is_read_on_another_connection_while_the_query_is_embedded(caller, corpus):
    """With the model embedding the query, what a search reads first goes to a pool thread's own
    connection; inside a transaction (whose rows only its connection sees) it stays on this one.
    Both answer alike, and the stale hot episode the preamble names is found either way."""
    from django.db import connection, transaction
    from django.utils import timezone

    from retrieval.query import SearchQuery
    from retrieval.services import search as search_service

    pack(corpus["trip"], "warm")
    Episode.objects.across_tenants("test").filter(public_id=corpus["cooking"]).update(needs_reindex=True)
    here: list[str] = []

    def count(execute, sql, params, many, context):
        here.append(sql)
        return execute(sql, params, many, context)

    def answer() -> tuple[list[tuple[int, str]], bool]:
        query = SearchQuery(text="Lisbon conference flight sourdough starter", limit=5, record_access=False)
        result = search_service(tenant=caller.tenant, query=query, now=timezone.now())
        return [(h.episode.pk, h.episode.layer) for h in result.hits], result.stale

    def preamble_here() -> bool:
        return any("lifecycle_memorypolicy" in sql for sql in here)

    with connection.execute_wrapper(count):
        apart = answer()
    assert here and not preamble_here()  # ranking's statements, not the preamble's
    here.clear()
    with transaction.atomic(), connection.execute_wrapper(count):
        inline = answer()
    assert preamble_here()
    assert apart == inline
    hits, stale = apart
    assert pk(corpus["trip"]) in [e for e, _ in hits] and pk(corpus["cooking"]) in [e for e, _ in hits]
    assert stale  # the hot episode the index missed, searched in Postgres meanwhile
