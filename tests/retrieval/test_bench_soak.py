"""`bench soak` end to end, briefly, on the suite's own embedded Postgres and Redis: the rows hold
what was read, the restart of the suite's Redis is lived through, and the tenants are gone after.

Restarting the suite's Redis is safe here: the suite runs one test at a time in one process, its
Redis is its own (under the run's temporary MEMORY_VAR_DIR), and other tests stop and start it too
(tests/platform/test_errors_and_health.py)."""

from __future__ import annotations

import io
import json

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from episodes.stores.hot import hot_store
from memory_platform.tenancy.models import Tenant
from retrieval.bench.soak_report import METRICS, TOLERANCE

pytestmark = pytest.mark.django_db(transaction=True)


def soak(*flags: str) -> tuple[str, str]:
    out, log = io.StringIO(), io.StringIO()
    call_command("bench", "soak", *flags, stdout=out, stderr=log)
    return out.getvalue(), log.getvalue()


def test_a_minute_of_soak_through_a_redis_restart_samples_every_interval_and_drops_its_tenants():
    before = Tenant.objects.count()
    out, log = soak("--minutes", "1", "--interval", "0.25", "--tenants", "2", "--json")
    result = json.loads(out)
    assert result["bench"] == "soak" and len(result["tenants"]) == 2
    samples = result["samples"]
    assert [s["minute"] for s in samples] == [0.0, 0.25, 0.5, 0.75, 1.0]
    # Each interval's operations, summed, are the run's totals; the soak did each kind.
    for kind, total in result["totals"]["ops"].items():
        assert sum(s["ops"][kind] for s in samples) == total
    assert all(result["totals"]["ops"][kind] > 0 for kind in ("ingest", "search", "tick", "forget", "unpack"))
    for sample in samples[1:]:
        assert sample["ops"]["turns"] == 10 * sample["ops"]["ingest"]
        assert 0 < sample["search_p50_ms"] <= sample["search_p95_ms"]
    # The simulated clock ran the 300 days over the minute: episodes went packed and forgotten.
    assert samples[-1]["simulated_day"] == pytest.approx(300, abs=1)
    assert any(s["episodes"]["warm"] + s["episodes"]["cold"] for s in samples)
    assert samples[-1]["episodes"]["forgotten"] > 0
    # What was read, read from the live servers (the embedded ones: none is external here); Redis
    # has nothing to read while it is down.
    restart = result["restart"]
    down = (restart["minute"], restart["minute"] + restart["down_s"] / 60)
    for sample in samples:
        assert sample["memory"]["self_mb"] > 0 and sample["memory"]["postgres_mb"] > 0
        during = down[0] <= sample["minute"] <= down[1]
        assert (sample["memory"]["redis_mb"] is None) is (sample["redisearch"] is None)
        assert during or sample["memory"]["redis_mb"] > 0
        dead = sample["dead_tuples"]
        assert dead["total"] >= sum(n for _, n in dead["top"]) and len(dead["top"]) <= 3
        assert sample["gin"]["size_mb"] > 0 and "episode_search_vector" in sample["gin"]["fastupdate"]
        if result["gin_support"] != "pgstattuple":
            assert sample["gin"]["pending_pages"] is None
        hnsw = sample["hnsw"]
        assert set(hnsw["by_index"]) == {"episode_packed_embedding_hnsw", "turn_packed_embedding_hnsw"}
        assert hnsw["size_mb"] == pytest.approx(sum(hnsw["by_index"].values()), abs=0.02)
    ft = samples[0]["redisearch"]
    assert ft["docs"] > 0 and ft["bytes_per_doc"] == round(ft["bytes"] / ft["docs"])
    assert ft["entries_per_doc"] == round(ft["entries"] / ft["docs"], 2)
    # One restart near the middle, lived through: searches went on while Redis was down.
    assert "error" not in restart, restart
    assert 0.4 <= restart["minute"] <= 0.55 and restart["down_s"] >= 5
    assert restart["searches"] > 0 and restart["degraded"] + restart["errors"] > 0
    assert "restarting the embedded Redis" in log and "Redis back" in log
    assert settings.EMBEDDED_REDIS is not None and settings.EMBEDDED_REDIS.status().running
    # The verdict: a line over the last half's samples per metric, by the rule it states.
    verdict = result["verdict"]
    assert verdict["window_minutes"] == [0.5, 1.0]
    assert set(verdict["metrics"]) == {m.key for m in METRICS}
    window = samples[2:]
    for key, metric in verdict["metrics"].items():
        read = next(m.read for m in METRICS if m.key == key)
        assert metric["samples"] == sum(read(s) is not None for s in window)  # none of Redis while down
        if metric["grows"] is None:
            assert key == "gin_pending_pages" and result["gin_support"] != "pgstattuple"
            continue
        assert (metric["first"], metric["last"]) == tuple(read(s) for s in window if read(s) is not None)[
            :: metric["samples"] - 1
        ]
        assert metric["limit"] >= TOLERANCE * min(metric["first"], metric["last"]) - 0.01
        assert metric["grows"] == (metric["rise"] > metric["limit"])
        assert (key in verdict["grows"]) == metric["grows"]
    # The tenants are gone, from Postgres and from Redis.
    assert Tenant.objects.count() == before
    assert not Tenant.objects.filter(name__in=result["tenants"]).exists()
    assert not [name for name in hot_store().index_names() if ":hot:" in name]


def test_the_table_has_a_row_per_interval_and_ends_with_a_verdict():
    out, _ = soak("--minutes", "0.3", "--interval", "0.1", "--no-restart", "--turns-per-s", "10")
    lines = out.splitlines()  # without --json, the progress and the rows too
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["min", "day", "ingest"])
    rows = [line.split() for line in lines[header + 1 :] if line.split() and line.split()[0][0].isdigit()]
    assert [float(r[0]) for r in rows] == [0.0, 0.1, 0.2, 0.3]
    assert all(int(r[2]) > 0 and int(r[3]) == 10 * int(r[2]) for r in rows[1:])  # ingest calls, turns
    assert "no Redis restart" in out and "restarting the embedded Redis" not in out
    assert "growth over the last half (minutes 0.20-0.30" in out
    assert out.splitlines()[-1].startswith("verdict: ")
    assert not Tenant.objects.filter(name__startswith="bench-soak-").exists()


def test_settings_that_cannot_run_are_refused_before_any_work(settings):
    with pytest.raises(CommandError, match="the interval at most the run"):
        soak("--minutes", "1", "--interval", "2")
    settings.EMBEDDED_REDIS = None  # REDIS_URL names a Redis the soak cannot restart
    with pytest.raises(CommandError, match="pass --no-restart"):
        soak("--minutes", "1", "--interval", "1")
    assert not Tenant.objects.filter(name__startswith="bench-soak-").exists()


def test_an_interrupted_soak_drops_its_tenants_and_says_so_in_a_line():
    from tests.conftest import interrupt_manage_py

    def under_way() -> None:
        assert Tenant.objects.filter(name__startswith="bench-soak-").count() == 3

    code, out, err = interrupt_manage_py(
        ["bench", "soak", "--minutes", "5", "--interval", "0.1", "--no-restart"],
        at=lambda line: line.split()[:1] == ["0.10"],  # the second row: the soak is under way
        before=under_way,
    )
    assert code == 130, out + err
    assert "Traceback" not in err and "interrupted: the tenants it loaded were dropped" in err, err
    assert "dropping 3 tenant(s)" in out
    assert not Tenant.objects.filter(name__startswith="bench-soak-").exists()


def test_the_entries_counted_come_back_after_churn_where_ft_infos_records_do_not(provided):
    """The soak judges the hot index by the entries its inverted indexes hold, counted, and not by
    ``FT.INFO``'s ``num_records``: RediSearch 2.10 adds a record for each vector indexed and never
    takes it back, so rewriting documents raises it for good though the index holds what it held."""
    from episodes.models import Episode, Turn
    from memory_platform.embedded.redis import GC_SETTINGS
    from memory_platform.redis_client import info_field
    from retrieval.bench.soak_probes import index_entries
    from tests.lifecycle.factories import conversation

    tenant = provided.tenant
    episode = Episode.objects.for_tenant(tenant).get(pk=conversation(tenant, session="s1", idle_days=1))
    store = hot_store()
    name = store.index_name(tenant.id.hex)

    def records() -> int:
        return int(info_field(store.client.execute_command("FT.INFO", name), "num_records"))

    # RediSearch collects an index only once it lost GC_SETTINGS' threshold of documents (half the
    # ballast), asked or not: here every removed document, for the counts to compare.
    store.client.execute_command("FT.CONFIG", "SET", "FORK_GC_CLEAN_THRESHOLD", 1)
    try:
        store.collect_garbage(tenant.id.hex)
        entries, before = index_entries(store.client, name), records()
        turns = list(Turn.objects.for_tenant(tenant).filter(episode=episode).values_list("pk", flat=True))
        documents = 1 + len(turns)
        assert entries > 10 * documents  # each document's words and tags
        for _ in range(3):  # every document written again as it was
            store.update_episode_fields(episode, turns, state=episode.state)
        store.collect_garbage(tenant.id.hex)
        assert index_entries(store.client, name) == entries
        assert records() >= before + 3 * documents  # a vector record a rewrite at least, never subtracted
    finally:
        store.client.execute_command(
            "FT.CONFIG", "SET", "FORK_GC_CLEAN_THRESHOLD", GC_SETTINGS["FORK_GC_CLEAN_THRESHOLD"]
        )
