"""What keeps the read path fast: usage counted after the answer is sent, in no index; one
query embedding that matches the batch pipeline."""

import numpy as np
import pytest
from django.db import connection

from episodes.models import Episode
from memory_platform.embeddings import get_embedder
from memory_platform.api.base import AfterResponse

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
