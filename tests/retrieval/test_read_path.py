"""What keeps the read path fast: usage counted in the background, in batches, in no index; one
query embedding that matches the batch pipeline."""

import time
from datetime import UTC, datetime

import numpy as np
import pytest
from django.conf import settings
from django.db import connection, transaction

from episodes.models import Episode, Turn
from episodes.scope import Scope
from memory_platform import db
from memory_platform.embeddings import get_embedder
from retrieval.usage import UsageRecorder, recorder

from ..conftest import pk
from .test_search import pack, turns

pytestmark = pytest.mark.django_db(transaction=True)

USAGE_COLUMNS = ("access_count", "traverse_count", "last_accessed_at", "version")


def test_usage_columns_are_in_no_index():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'episodes_episode'")
        indexes = cursor.fetchall()
    assert len(indexes) > 3
    for name, definition in indexes:
        for column in USAGE_COLUMNS:
            assert column not in definition, f"{name} indexes {column}: every search would write the index"


def test_search_counts_the_access_of_each_returned_episode_once_after_answering(caller):
    for i in range(3):
        turns(caller, f"s{i}", [f"garden note number {i}", "noted"])
    response = caller.post("/api/v1/search", {"query": "garden note", "limit": 2})
    assert response.status_code == 200
    returned = [hit["episode_id"] for hit in response.json()["results"]]
    assert len(returned) == 2

    def counts():
        return dict(
            Episode.objects.across_tenants("test")
            .filter(tenant=caller.tenant)
            .values_list("pk", "access_count")
        )

    # Queued for the background writer (this test runs outside a transaction, as the server does).
    assert recorder.pending() >= 2
    assert not any(counts().values())
    recorder.flush()
    assert {e: n for e, n in counts().items() if n} == {pk(public_id): 1 for public_id in returned}


def test_the_background_writer_writes_queued_uses_in_one_batch(caller):
    for i in range(3):
        turns(caller, f"s{i}", [f"orchard note {i}", "noted"])
    ids = sorted(
        Episode.objects.across_tenants("test").filter(tenant=caller.tenant).values_list("pk", flat=True)
    )
    before = {e.pk: e for e in Episode.objects.across_tenants("test").filter(pk__in=ids)}
    first, later = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC)
    writer = UsageRecorder(interval=0.05)
    writer.add(caller.tenant.id, ids[:2], first)
    writer.add(caller.tenant.id, ids[1:2], later, traversed=ids[2:])
    deadline = time.monotonic() + 10
    while writer.pending() and time.monotonic() < deadline:
        time.sleep(0.02)
    writer.stop()
    after = {e.pk: e for e in Episode.objects.across_tenants("test").filter(pk__in=ids)}
    assert [after[pk].access_count - before[pk].access_count for pk in ids] == [1, 2, 0]
    assert [after[pk].traverse_count - before[pk].traverse_count for pk in ids] == [0, 0, 1]
    assert [after[pk].version - before[pk].version for pk in ids] == [1, 2, 1]
    assert [after[pk].last_accessed_at for pk in ids] == [first, later, later]


def test_queued_uses_never_touch_another_tenants_episode(caller, outsider):
    turns(caller, "s", ["a note of mine", "ok"])
    turns(outsider, "s", ["a note of theirs", "ok"])
    theirs = Episode.objects.across_tenants("test").get(tenant=outsider.tenant)
    version = theirs.version
    writer = UsageRecorder(interval=60)
    writer.add(caller.tenant.id, [theirs.pk], datetime(2026, 3, 1, tzinfo=UTC))  # a forged id
    assert writer.flush() == 0
    writer.stop()
    theirs.refresh_from_db()
    assert theirs.access_count == 0 and theirs.version == version


def test_uses_inside_a_transaction_are_written_at_once_on_its_connection(caller):
    turns(caller, "s", ["a pear note", "ok"])
    episode = Episode.objects.across_tenants("test").get(tenant=caller.tenant)
    with transaction.atomic():
        UsageRecorder(interval=60).add(caller.tenant.id, [episode.pk], datetime(2026, 3, 1, tzinfo=UTC))
        episode.refresh_from_db()
        assert episode.access_count == 1


def test_query_embedding_matches_the_batch_pipeline():
    embedder = get_embedder("local")
    # Queries and batches go through ONNX Runtime (exported from the torch model into the data
    # directory): one text and a batch give the same vectors, and torch's.
    assert embedder._onnx() is not None
    assert list((settings.VAR_DIR / "models").glob("*.onnx"))
    texts = ["What did Caroline do at the support group last week?", "hiking", "x " * 400, "", "café 東京 🚀"]
    batch = embedder.embed(texts)
    for text, expected in zip(texts, batch, strict=True):
        one = embedder.embed_one(text)
        assert one.dtype == np.float32 and one.shape == (384,)
        assert float(np.abs(one - expected).max()) < 1e-5
        assert float(np.abs(one - embedder._embed_one_torch(text)).max()) < 1e-5
        assert abs(float(np.linalg.norm(one)) - 1.0) < 1e-5


def test_ranking_reads_only_candidates_that_can_reach_the_top_and_ranks_the_same(caller):
    from datetime import UTC, datetime, timedelta

    from episodes.stores.rows import rank_rows
    from lifecycle.models import policy_row
    from retrieval.ranking import rank_candidates, rerank
    from retrieval.weights import platform_weights

    for i in range(8):
        turns(caller, f"s{i}", [f"note {i}", "ok"])
    ids = sorted(
        Episode.objects.across_tenants("test").filter(tenant=caller.tenant).values_list("pk", flat=True)
    )
    now = datetime(2026, 6, 1, tzinfo=UTC)
    for n, episode_id in enumerate(ids):  # varied priority: anchors, use counts, idle times
        Episode.objects.across_tenants("test").filter(pk=episode_id).update(
            anchor=n % 3 == 0, access_count=n * 7, last_accessed_at=now - timedelta(days=n * 9)
        )
    Episode.objects.across_tenants("test").filter(pk=ids[1]).update(state="forgotten")
    weights = platform_weights()
    policy = policy_row(caller.tenant)
    relevance = {e: 1.0 - 0.04 * n for n, e in enumerate(ids)}
    relevance[ids[7]] = 0.1  # far below any reach
    full = {row.pk: row for row in rank_rows(caller.tenant, ids)}
    assert ids[1] not in full
    for limit in (1, 2, 3, 5, 10):
        pruned = rank_candidates(
            lambda ids, mentioned: rank_rows(caller.tenant, ids, mentioned=mentioned),
            relevance,
            limit,
            weights,
        )
        assert ids[1] not in pruned
        best = [pk for pk, _, _ in rerank(full, relevance, weights, policy, now)[:limit]]
        assert [pk for pk, _, _ in rerank(pruned, relevance, weights, policy, now)[:limit]] == best
        if limit <= 5:
            assert ids[7] not in pruned


def test_a_query_of_stopwords_only_is_not_degraded(caller):
    turns(caller, "s1", ["the garden is green", "yes"])
    body = caller.post("/api/v1/search", {"query": "what is the"}).json()
    assert body["degraded"] is False


def _packed_mismatches() -> int:
    """Turns whose `packed` column disagrees with their episode's layer (migration 0008)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM episodes_turn t JOIN episodes_episode e ON e.id = t.episode_id "
            "WHERE t.packed <> (e.layer IN ('warm', 'cold'))"
        )
        return int(cursor.fetchone()[0])


def _packed_turns(public_id: str) -> set[bool]:
    episode_id = pk(public_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT packed FROM episodes_turn WHERE episode_id = %s", [episode_id])
        return {row[0] for row in cursor.fetchall()}


def test_packed_turns_follow_their_episode_through_every_move(caller):
    body = turns(caller, "s1", ["we booked the lisbon hotel", "by the river", "for three nights"])
    episode_id = body["episode_ids"][0]
    assert _packed_turns(episode_id) == {False}
    pack(episode_id, "warm")
    assert _packed_turns(episode_id) == {True}
    pack(episode_id, "cold")
    assert _packed_turns(episode_id) == {True}
    # A turn written into a packed episode takes its episode's value.
    episode = Episode.objects.across_tenants("test").get(public_id=episode_id)
    Turn.objects.create(
        tenant=caller.tenant,
        episode=episode,
        session_id="s1",
        seq=99,
        role="user",
        text="late",
        occurred_at=episode.last_occurred_at,
        ingested_at=episode.last_occurred_at,
    )
    assert _packed_turns(episode_id) == {True}
    # An ORM save of a turn cannot set it wrong (the column is not on the model).
    Turn.objects.across_tenants("test").filter(episode=episode).first().save()
    assert _packed_turns(episode_id) == {True}
    assert caller.post(f"/api/v1/memories/{episode_id}/unpack").status_code == 200
    assert _packed_turns(episode_id) == {False}
    assert _packed_mismatches() == 0


def test_a_packed_episode_is_found_through_one_of_its_turns(caller):
    body = turns(
        caller, "s1", ["we talked about the weather", "then the zeppelin museum in friedrichshafen", "ok"]
    )
    episode_id = body["episode_ids"][0]
    for i in range(3):
        turns(caller, f"other{i}", [f"unrelated chat number {i}", "fine"])
    pack(episode_id, "cold")
    Episode.objects.across_tenants("test").filter(public_id=episode_id).update(
        headline="weather", search_text="weather", keywords=[]
    )
    found = caller.post("/api/v1/search", {"query": "zeppelin museum", "layers": ["warm", "cold"]}).json()
    assert [hit["episode_id"] for hit in found["results"]][:1] == [episode_id]


@pytest.mark.parametrize("plan", ["exact", "approximate"])
def test_both_warm_cold_plans_find_a_packed_episode_by_vector_and_by_words(caller, monkeypatch, plan):
    from episodes.stores import archive

    monkeypatch.setattr(archive, "EXACT_PACKED_TURNS", 10_000 if plan == "exact" else 0)
    monkeypatch.setattr(archive, "_packed_count_cache", {})
    target = turns(caller, "s1", ["my sister adopted a greyhound named comet", "lovely"])["episode_ids"][0]
    others = [
        turns(caller, f"o{i}", [f"meeting notes about budget line {i}", "ok"])["episode_ids"][0]
        for i in range(4)
    ]
    for episode_id in [target, *others]:
        pack(episode_id, "warm")
    assert archive.packed_turns(caller.tenant) == 10
    by_words = caller.post("/api/v1/search", {"query": "greyhound comet", "layers": ["warm"]}).json()
    assert by_words["results"][0]["episode_id"] == target
    vector = get_embedder("local").embed_one("a dog called comet joined my sister's family").tolist()
    by_vector = caller.post("/api/v1/search", {"query": "", "vector": vector, "layers": ["warm"]}).json()
    assert by_vector["results"][0]["episode_id"] == target


@pytest.mark.parametrize("plan", ["exact", "approximate"])
def test_a_packed_turn_scores_what_its_hot_document_scored(caller, monkeypatch, plan):
    # The tiers' vector lists merge by score (retrieval.ranking.by_score): a turn compared in
    # Postgres once packed must score as its document did in Redis.
    from episodes.stores import archive
    from episodes.stores.hot import hot_store

    monkeypatch.setattr(archive, "EXACT_PACKED_TURNS", 10_000 if plan == "exact" else 0)
    monkeypatch.setattr(archive, "_packed_count_cache", {})
    texts = ["my sister adopted a greyhound named comet", "he sleeps all day", "and hates the rain"]
    episode = pk(turns(caller, "s1", texts)["episode_ids"][0])
    vector = get_embedder("local").embed_one("a dog called comet")
    hot = {
        h.turn_id: h.score
        for h in hot_store().vector_search(caller.tenant.id.hex, vector=vector, scope=Scope(), k=10)
    }
    pack(episode, "warm")
    with transaction.atomic():  # on the request's connection, inside its transaction
        packed = {
            h.turn_id: h.score
            for h in archive.rescored(
                archive.vector_candidates(caller.tenant, vector=vector, scope=Scope(layers=("warm",)), k=10),
                vector,
                10,
            )
            if h.turn_id is not None
        }
    assert len(hot) == 3 and set(packed) == set(hot)
    for turn_id, score in hot.items():
        assert packed[turn_id] == pytest.approx(score, abs=1e-4)


@pytest.mark.parametrize("plan", ["exact", "approximate"])
def test_the_broad_full_text_pass_is_any_word_when_exact_and_any_two_words_at_scale(
    caller, monkeypatch, plan
):
    from episodes.stores import archive

    monkeypatch.setattr(archive, "EXACT_PACKED_TURNS", 10_000 if plan == "exact" else 0)
    monkeypatch.setattr(archive, "_packed_count_cache", {})
    texts = {
        "two": "my sister adopted a greyhound named comet",  # shares two of the query's words
        "one": "we sat by the canal near the bakery",  # shares one
        "none": "budget meeting notes for the quarter",
    }
    episodes = {name: turns(caller, name, [text, "ok"])["episode_ids"][0] for name, text in texts.items()}
    for episode_id in episodes.values():
        pack(episode_id, "warm")
    text_hits = archive.text_search(
        caller.tenant,
        text="did my sister walk her greyhound by the canal?",  # no row holds every word
        scope=Scope(layers=("warm",), states=("active",)),
        k=10,
    )
    found = {Episode.objects.across_tenants("test").get(pk=hit.episode_id).public_id for hit in text_hits}
    assert episodes["two"] in found and episodes["none"] not in found
    assert (episodes["one"] in found) is (plan == "exact")


@pytest.mark.parametrize("plan", ["exact", "approximate"])
def test_the_planner_knows_the_broad_passs_words(caller, monkeypatch, plan):
    # Computed while planning, the broad pass's tsquery is in the plan as a constant, so its
    # matches are estimated from the column's statistics rather than as a fixed share of every
    # tenant's packed turns (docs/decisions/0061).
    from episodes.stores import archive

    monkeypatch.setattr(archive, "EXACT_PACKED_TURNS", 10_000 if plan == "exact" else 0)
    monkeypatch.setattr(archive, "_packed_count_cache", {})
    pack(turns(caller, "s1", ["my sister adopted a greyhound named comet", "ok"])["episode_ids"][0], "warm")
    statements = []

    def keep(execute, sql, params, many, context):
        if "window_vector @@" in sql:
            statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        archive.text_search(caller.tenant, text="greyhound sister", scope=Scope(layers=("warm",)), k=10)
    (sql, params), *_ = statements
    plan_text = "\n".join(line for (line,) in db.fetch(f"EXPLAIN {sql}", params, tenant=caller.tenant))
    broad = "'greyhound' & 'sister'" if plan == "approximate" else "'greyhound' | 'sister'"
    assert broad in plan_text.replace("''", "'")
    assert "string_agg" not in plan_text


def test_the_all_words_pass_ranks_at_most_its_cap_of_matches(caller, monkeypatch):
    # One common word can match thousands of packed episodes: only `cap` of them are ranked.
    from episodes.stores import archive

    monkeypatch.setattr(archive, "EXACT_PACKED_TURNS", 0)
    monkeypatch.setattr(archive, "_packed_count_cache", {})
    monkeypatch.setattr(archive, "TEXT_CANDIDATES", 2)
    for i in range(5):
        pack(turns(caller, f"s{i}", [f"the greyhound ran lap {i}", "ok"])["episode_ids"][0], "warm")
    text_hits = archive.text_search(
        caller.tenant,
        text="the greyhound",  # one word after the stopwords: the two-word pass has nothing
        scope=Scope(layers=("warm",), states=("active",)),
        raw_turns=False,  # the episodes' own text
        k=10,
    )
    assert len(text_hits) == 2


def test_search_reads_its_settings_from_the_tenants_policy(caller):
    from lifecycle.models import MemoryPolicy, read_policy
    from memory_platform.tenancy.models import Tenant
    from retrieval.weights import tenant_weights

    def default_weights(tenant):
        return tenant_weights(read_policy(tenant))

    def activation_limit(tenant):
        return read_policy(tenant).activation_limit

    MemoryPolicy.objects.across_tenants("test").filter(tenant=caller.tenant).delete()
    weights = default_weights(Tenant.objects.get(pk=caller.tenant.pk))  # created with the defaults
    assert (weights.vector, weights.text, weights.k) == (0.5, 0.5, 10)
    assert MemoryPolicy.objects.across_tenants("test").filter(tenant=caller.tenant).count() == 1

    MemoryPolicy.objects.across_tenants("test").filter(tenant=caller.tenant).update(
        rrf_vector_weight=0.4, rrf_text_weight=0.6, rrf_k=20, activation_limit=7, search_packed_turns=False
    )
    tenant = Tenant.objects.get(pk=caller.tenant.pk)
    weights = default_weights(tenant)
    assert (weights.vector, weights.text, weights.k, activation_limit(tenant)) == (0.4, 0.6, 20, 7)
    assert read_policy(tenant).search_packed_turns is False


def test_a_server_embedded_search_equals_one_with_the_same_vector_from_the_caller(caller):
    """The server's query embedding gives the answer a caller gets by sending that embedding."""
    for i in range(4):
        turns(caller, f"s{i}", [f"the orchard harvest number {i} went well", "apples and pears"])
    pack(
        Episode.objects.across_tenants("test").filter(tenant=caller.tenant).order_by("pk").first().pk, "warm"
    )
    question = "how did the orchard harvest go?"
    vector = get_embedder("local").embed_one(question)
    embedded = caller.post("/api/v1/search", {"query": question, "explain": True}).json()
    sent = caller.post(
        "/api/v1/search", {"query": question, "vector": vector.tolist(), "explain": True}
    ).json()

    def ranked(body):
        return [(r["episode_id"], r["layer"], round(r["score"], 4)) for r in body["results"]]

    assert len(embedded["results"]) == 4 and {r["layer"] for r in embedded["results"]} == {"hot", "warm"}
    assert ranked(embedded) == ranked(sent)
    assert not embedded["degraded"]


def test_vectors_stay_in_their_rows_not_in_toast(caller):
    """An episode's vector and a turn's two are read with their rows (migration 0024): out of line,
    each read of one is another lookup in the table's TOAST relation."""
    turns(caller, "inline", ["a turn long enough to be a turn " * 8, "and its reply, as long " * 8])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(pg_column_toast_chunk_id(embedding)) FROM episodes_episode "
            "WHERE embedding IS NOT NULL"
        )
        episodes, out_of_line = cursor.fetchone()
        cursor.execute(
            "SELECT count(*), count(pg_column_toast_chunk_id(embedding)), "
            "count(pg_column_toast_chunk_id(context_embedding)) FROM episodes_turn "
            "WHERE embedding IS NOT NULL AND context_embedding IS NOT NULL"
        )
        turn_rows, turns_out, windows_out = cursor.fetchone()
    assert episodes >= 1 and turn_rows >= 2
    assert (out_of_line, turns_out, windows_out) == (0, 0, 0)


def test_the_turns_an_answer_may_show_of_a_packed_episode_are_read_with_its_turns(caller, outsider):
    """One statement reads a packed episode's turns with the text of those the choice may show:
    within ``reach`` of a matched turn, and the first ones of an episode matched by none."""
    from episodes.stores import rows

    texts = [f"turn number {i} about the harbour" for i in range(7)]
    first = pk(turns(caller, "s1", texts)["episode_ids"][0])
    second = pk(turns(caller, "s2", texts)["episode_ids"][0])
    for episode_id in (first, second):
        pack(episode_id, "warm")
    ids = [
        t
        for (t,) in Turn.objects.for_tenant(caller.tenant)
        .filter(episode_id=first)
        .order_by("seq")
        .values_list("pk")
    ]
    read, _ = rows.turns_with_similarity(
        caller.tenant, [first, second], full=set(), around=[ids[3]], leading=[second], reach=1
    )
    assert [bool(t.text) for t in read[first]] == [False, False, True, True, True, False, False]
    assert [bool(t.text) for t in read[second]] == [True, True, True, False, False, False, False]
    assert read[first][2].text == texts[2]
    # Another tenant's read of the same ids finds no turn.
    theirs, _ = rows.turns_with_similarity(
        outsider.tenant, [first, second], full=set(), around=[ids[3]], leading=[second], reach=1
    )
    assert theirs == {first: [], second: []}

    # The search answer shows a packed hit's turns without a statement of their own for the texts.
    statements = []

    def keep(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        found = caller.post("/api/v1/search", {"query": "turn number 3 harbour", "layers": ["warm"]}).json()
    assert any("turn number" in hit["text"] for hit in found["results"])
    assert not [sql for sql in statements if "WHERE tenant_id = %s AND id = ANY(%s)" in sql and "text" in sql]
