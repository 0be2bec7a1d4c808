"""What keeps the read path fast: usage counted after the answer is sent, in no index; one
query embedding that matches the batch pipeline."""

import numpy as np
import pytest
from django.db import connection

from episodes.models import Episode
from memory_platform.api.base import AfterResponse
from memory_platform.embeddings import get_embedder

from .test_search import turns

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


def test_after_response_work_runs_on_close_and_its_failure_is_only_logged(caller, caplog):
    calls = []
    ok = AfterResponse({"a": 1}, after=lambda: calls.append("done"))
    assert calls == []
    ok.close()
    ok.close()
    assert calls == ["done"]

    def boom():
        raise RuntimeError("usage update failed")

    failing = AfterResponse({"a": 1}, after=boom)
    failing.close()
    assert "after-response work failed" in caplog.text


def test_search_counts_the_access_of_each_returned_episode_once(caller):
    for i in range(3):
        turns(caller, f"s{i}", [f"garden note number {i}", "noted"])
    response = caller.post("/api/v1/search", {"query": "garden note", "limit": 2})
    assert response.status_code == 200
    returned = [hit["episode_id"] for hit in response.json()["results"]]
    assert len(returned) == 2
    counts = dict(Episode.objects.filter(tenant=caller.tenant).values_list("pk", "access_count"))
    assert {pk: n for pk, n in counts.items() if n} == {pk: 1 for pk in returned}


def test_query_embedding_matches_the_batch_pipeline():
    embedder = get_embedder("local")
    texts = ["What did Caroline do at the support group last week?", "hiking", "x " * 400]
    batch = embedder.embed(texts)
    for text, expected in zip(texts, batch, strict=True):
        one = embedder.embed_one(text)
        assert one.dtype == np.float32 and one.shape == (384,)
        assert float(np.dot(one, expected)) > 0.9999
        assert abs(float(np.linalg.norm(one)) - 1.0) < 1e-5


def test_ranking_reads_only_candidates_that_can_reach_the_top_and_ranks_the_same(caller):
    from datetime import UTC, datetime, timedelta

    from retrieval.services import RetrievalWeights, _rank_candidates, _rank_rows, _rerank

    for i in range(8):
        turns(caller, f"s{i}", [f"note {i}", "ok"])
    ids = sorted(Episode.objects.filter(tenant=caller.tenant).values_list("pk", flat=True))
    now = datetime(2026, 6, 1, tzinfo=UTC)
    for n, pk in enumerate(ids):  # varied priority: anchors, use counts, idle times
        Episode.objects.filter(pk=pk).update(
            anchor=n % 3 == 0, access_count=n * 7, last_accessed_at=now - timedelta(days=n * 9)
        )
    Episode.objects.filter(pk=ids[1]).update(state="forgotten")
    weights = RetrievalWeights()
    relevance = {pk: 1.0 - 0.04 * n for n, pk in enumerate(ids)}
    relevance[ids[7]] = 0.1  # far below any reach
    full = {row.pk: row for row in _rank_rows(caller.tenant, ids)}
    assert ids[1] not in full
    for limit in (1, 2, 3, 5, 10):
        pruned = _rank_candidates(caller.tenant, relevance, limit, weights)
        assert ids[1] not in pruned
        best = [pk for pk, _, _ in _rerank(full, relevance, weights, now)[:limit]]
        assert [pk for pk, _, _ in _rerank(pruned, relevance, weights, now)[:limit]] == best
        if limit <= 5:
            assert ids[7] not in pruned


def test_a_query_of_stopwords_only_is_not_degraded(caller):
    turns(caller, "s1", ["the garden is green", "yes"])
    body = caller.post("/api/v1/search", {"query": "what is the"}).json()
    assert body["degraded"] is False
