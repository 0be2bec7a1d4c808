"""`bench search` end to end at a small size: the service and a real gunicorn over HTTP."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from memory_platform.tenancy.models import Tenant

pytestmark = pytest.mark.django_db(transaction=True)


def test_bench_search_measures_every_path_and_leaves_nothing_behind(monkeypatch):
    # The web server it starts serves with the platform's settings (as `make run` does), on this
    # run's database and Redis, which it is given as URLs.
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "memory_platform.settings")
    tenants = Tenant.objects.count()
    out = io.StringIO()
    call_command(
        "bench", "search", "--sizes", "300", "--queries", "10", "--json", stdout=out, stderr=io.StringIO()
    )
    rows = json.loads(out.getvalue())["results"]
    assert [r["path"] for r in rows] == [
        "service, caller vector",
        "service, local embedding",
        "HTTP, caller vector",
        "HTTP, local embedding",
        "floor: embedding",
        "floor: hot (Redis)",
        # All 300 fit in the hot tier: the platform never asks Postgres, and neither does the floor.
        "floor: slower store",
        "floor: + embedding",
    ]
    for row in rows:
        assert row["episodes"] == 300 and row["queries"] == 10
        assert 0 < row["p50"] <= row["p95"] <= row["p99"]
    by_path = {r["path"]: r for r in rows}
    # Each platform path is compared with its floor: the slower store, plus the embedding where
    # the platform embeds the query.
    for path, floor in (
        ("service, caller vector", "floor: slower store"),
        ("HTTP, local embedding", "floor: + embedding"),
    ):
        row = by_path[path]
        assert row["p95_ms"] == row["p95"] and row["floor_p95_ms"] == by_path[floor]["p95"]
        assert row["ratio_to_floor"] == round(row["p95"] / by_path[floor]["p95"], 2)
    assert by_path["floor: + embedding"]["p50"] > by_path["floor: slower store"]["p50"]
    assert by_path["floor: slower store"]["p95"] == by_path["floor: hot (Redis)"]["p95"]
    # What a search costs every process, beside what the floor's parts cost them: the service runs
    # in this process, the embedded Postgres and Redis are read from theirs.
    for part in ("floor: embedding", "floor: hot (Redis)"):
        assert by_path[part]["cpu_ms"]["python"] > 0 and by_path[part]["cpu_ms"]["total"] > 0
    assert by_path["floor: hot (Redis)"]["cpu_ms"]["redis"] > 0
    assert by_path["floor: embedding"]["cpu_ms"]["python"] > by_path["floor: hot (Redis)"]["cpu_ms"]["python"]
    for path, parts in (
        ("service, caller vector", ["floor: hot (Redis)"]),
        ("service, local embedding", ["floor: embedding", "floor: hot (Redis)"]),
        # The web server's processes, not the client's, are the platform's Python over HTTP.
        ("HTTP, caller vector", ["floor: hot (Redis)"]),
        ("HTTP, local embedding", ["floor: embedding", "floor: hot (Redis)"]),
    ):
        row = by_path[path]
        spent = row["cpu_ms"]
        assert spent["python"] > 0 and spent["redis"] > 0 and spent["postgres"] > 0  # its policy, its ranking
        assert spent["total"] == pytest.approx(spent["python"] + spent["postgres"] + spent["redis"], abs=0.02)
        floor_total = sum(by_path[part]["cpu_ms"]["total"] for part in parts)
        assert row["floor_cpu_ms"]["total"] == pytest.approx(floor_total, abs=0.02)
        assert row["cpu_ratio_to_floor"] == round(spent["total"] / row["floor_cpu_ms"]["total"], 2)
        assert row["cpu_bound_ms"] == round(spent["total"] / len(os.sched_getaffinity(0)), 2)
    # The web server parses the request, checks the key and writes the answer: more than the service.
    assert (
        by_path["HTTP, caller vector"]["cpu_ms"]["python"]
        > by_path["service, caller vector"]["cpu_ms"]["python"]
    )
    assert Tenant.objects.count() == tenants  # the loaded tenant is dropped


def test_bench_search_loads_a_server_served_as_make_run_serves_with_each_number_of_clients(monkeypatch):
    """`--clients 1,3`: each load's searches per second and the latency its clients saw, on a web
    server of make run's workers started for the loads; every answer a 200, nothing left behind."""
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "memory_platform.settings")
    monkeypatch.setattr("retrieval.bench.load.WARM_UP_SECONDS", 1.0)
    tenants = Tenant.objects.count()
    out, err = io.StringIO(), io.StringIO()
    call_command(
        *("bench", "search", "--sizes", "200", "--queries", "5", "--json"),
        *("--clients", "1,3", "--seconds", "2"),
        stdout=out,
        stderr=err,
    )
    loads = [r for r in json.loads(out.getvalue())["results"] if "clients" in r]
    assert [(r["path"], r["clients"]) for r in loads] == [
        ("HTTP load, 1 client(s), caller vector", 1),
        ("HTTP load, 3 client(s), caller vector", 3),
    ]
    for row in loads:
        assert row["failed"] == 0 and row["searches"] > 0 and row["seconds"] >= 2
        assert row["searches_per_s"] == pytest.approx(row["searches"] / row["seconds"], rel=0.02)
        assert 0 < row["p50"] <= row["p95"]
    assert "2 workers, as make run serves" in err.getvalue()
    assert Tenant.objects.count() == tenants


@pytest.mark.parametrize("exact", [True, False])
def test_the_floor_asks_postgres_for_a_tenant_with_packed_turns_on_either_plan(monkeypatch, exact):
    from datetime import timedelta

    import numpy as np
    from django.utils import timezone

    from episodes.stores import archive
    from memory_platform.tenancy.services import tenant_create
    from retrieval.bench.floor import measure_floor
    from retrieval.bench.search import write_batch
    from retrieval.bench.text import sentence

    if not exact:
        # The approximate plan's statement walks the shared graph (a large tenant's plan).
        monkeypatch.setattr(archive, "EXACT_PACKED_TURNS", 0)
    tenant = tenant_create(name="floor")
    rng = np.random.default_rng(3)
    texts = [sentence(rng, 8) for _ in range(20)]
    vectors = rng.normal(size=(20, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    now = timezone.now()
    layers = ["hot"] * 5 + ["warm"] * 10 + ["cold"] * 5
    write_batch(tenant, 0, texts, vectors, [now - timedelta(days=30)] * 20, layers, now)
    archive._packed_count_cache.clear()
    assert archive.exact_plan(tenant) is exact
    floor = measure_floor(tenant, [(texts[i], vectors[i].tolist()) for i in (5, 12, 17)])
    assert len(floor.packed) == len(floor.hot) == 3 and all(ms > 0 for ms in floor.packed)
    assert floor.stores() == [max(h, p) for h, p in zip(floor.hot, floor.packed, strict=True)]


def test_a_kept_tenant_is_reused_only_while_its_layers_are_as_loaded(monkeypatch):
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "memory_platform.settings")
    from episodes.models import Episode
    from episodes.stores.hot import hot_store

    def bench(*flags: str) -> str:
        out = io.StringIO()
        call_command("bench", "search", "--sizes", "300", "--queries", "5", *flags, stdout=out)
        return out.getvalue()

    log = bench("--keep")
    assert re.search(r"loaded in \d+ s; the database grew by \d+ MB, Redis's memory by -?\d+ MB", log)
    kept = Tenant.objects.get(name__startswith="bench-search-300-")
    # Loaded as ingest leaves a tenant (all 300 fit in its hot tier): indexed in Redis.
    hot_ids = set(
        Episode.objects.across_tenants("test").filter(tenant=kept, layer="hot").values_list("pk", flat=True)
    )
    assert len(hot_ids) == 300 and hot_store().episode_ids(kept.id.hex) == hot_ids
    assert f"reusing {kept.name}" in bench("--reuse")
    # A tick beside `make run` moves episodes out of hot: the tenant no longer is what was loaded.
    Episode.objects.across_tenants("test").filter(
        tenant=kept, pk__in=Episode.objects.across_tenants("test").filter(tenant=kept).values("pk")[:10]
    ).update(layer="warm")
    log = bench("--reuse")
    assert f"not reusing {kept.name}: its layers changed since it was loaded (290 hot, 10 warm, 0 cold" in log
    assert "loading 300 episodes" in log
    assert list(Tenant.objects.filter(name__startswith="bench-search-300-")) == [kept]  # the new one dropped
    kept.delete()


def test_bench_ingest_puts_the_embedders_own_throughput_beside_the_platforms():
    out = io.StringIO()
    call_command(
        "bench", "ingest", "--turns", "40", "--batch", "20", "--modes", "durable,local", "--json",
        stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    durable, local = json.loads(out.getvalue())["results"]
    assert durable["turns_per_s"] > 0
    assert "embedder_texts_per_s" not in durable  # nothing is embedded while the caller waits
    assert local["turns_per_s"] > 0 and local["embedder_texts_per_s"] > 0
    # The embedder alone is measured before and after the platform, on this machine's load.
    before, after = local["embedder_texts_per_s_before_after"]
    assert local["embedder_texts_per_s"] == pytest.approx((before + after) / 2, abs=0.1)
    share = local["turns_per_s"] / local["embedder_texts_per_s"]
    assert local["embedder_share"] == pytest.approx(share, abs=0.002)
    assert not Tenant.objects.filter(name__startswith="bench-ingest-").exists()


@pytest.mark.parametrize("at", ["while loading", "while measuring"])
def test_bench_search_interrupted_drops_its_tenant_and_says_so_in_a_line(at):
    """Ctrl-C (SIGINT) during the load or the measurements: exit code 130, one line instead of a
    traceback, and the half-loaded or half-measured tenant dropped."""
    from tests.conftest import interrupt_manage_py

    size, marker = (20_000, "loaded 2000/") if at == "while loading" else (300, "measuring service")

    def loaded() -> None:
        assert Tenant.objects.filter(name__startswith=f"bench-search-{size}-").exists()

    code, out, err = interrupt_manage_py(
        ["bench", "search", "--sizes", str(size), "--queries", "2000"],
        at=lambda line: marker in line,
        before=loaded,
    )
    assert marker in out, out + err
    assert code == 130, out + err
    assert "Traceback" not in err and "interrupted: the tenants it loaded were dropped" in err, err
    assert not Tenant.objects.filter(name__startswith=f"bench-search-{size}-").exists(), out + err


@pytest.mark.parametrize("workers", [1, 2])
def test_bench_tick_times_each_step_of_two_ticks_and_leaves_nothing_behind(workers):
    """``--workers 2``: the tenants' ticks shared by two processes, as make run's worker does; the
    total is wall time, the steps' seconds are summed over the processes."""
    from lifecycle.tick import STEPS

    tenants = Tenant.objects.count()
    out, log = io.StringIO(), io.StringIO()
    call_command(
        "bench", "tick", "--episodes", "300", "--tenants", "2", "--vectors", "0.5", "--json",
        "--workers", str(workers), stdout=out, stderr=log,
    )  # fmt: skip
    result = json.loads(out.getvalue())
    assert result["bench"] == "tick" and (result["tenants"], result["episodes"]) == (2, 300)
    assert result["workers"] == workers
    # What the moves write into, as the first tick starts (a bloated graph slows every move).
    assert result["database"]["dead_tuples"] >= 0
    assert set(result["database"]["hnsw_mb"]) == {
        "episode_packed_embedding_hnsw",
        "turn_packed_embedding_hnsw",
    }
    assert result["database"]["hnsw_mb"]["episode_packed_embedding_hnsw"] > 0  # half the packed have vectors
    first, second = result["ticks"]["first"], result["ticks"]["second"]
    for tick in (first, second):
        assert list(tick["steps"]) == list(STEPS)
        assert all(seconds >= 0 for seconds in tick["steps"].values())
        assert sum(tick["steps"].values()) <= workers * tick["total"] + 0.01
        assert tick.get("processes", 1) == workers
        assert tick["statuses"] == {"succeeded": 2}
        assert 590 <= tick["counts"]["scored"] <= 600  # a few loaded forgotten
        assert len(tick["load_average"]) == 3
    # A day after the load some episodes crossed a threshold; the second tick finds nothing to do.
    assert set(first["counts"]) > {"scored"}
    assert set(second["counts"]) == {"scored"}
    assert "loading 2 tenant(s) of 300 episodes" in log.getvalue()
    assert Tenant.objects.count() == tenants  # both dropped


def test_bench_tick_keeps_its_tenants_and_ticks_them_again_with_reuse():
    """``--keep`` leaves the loaded tenants; ``--reuse`` ticks them again (loading only those
    missing), a day after now, and keeps them; a run without either drops what it loaded."""
    tenants = Tenant.objects.count()

    def bench(count, flag):
        out = io.StringIO()
        call_command(
            "bench", "tick", "--episodes", "200", "--tenants", str(count), "--vectors", "0", "--json", flag,
            stdout=out, stderr=io.StringIO(),
        )  # fmt: skip
        return json.loads(out.getvalue())

    # One kept from a first run; a --reuse of two ticks it and loads one more.
    first = bench(1, "--keep")
    kept = list(Tenant.objects.filter(name__startswith="bench-tick-200-"))
    assert first["reused"] == 0 and len(kept) == 1
    again = bench(2, "--reuse")
    assert again["reused"] == 1 and again["ticks"]["first"]["statuses"] == {"succeeded": 2}
    assert again["ticks"]["first"]["counts"]["scored"] >= 2 * 190  # both tenants ticked
    assert Tenant.objects.filter(name__startswith="bench-tick-200-").count() == 2
    from django.utils import timezone

    from rights.deletion import drop_tenant

    for tenant in Tenant.objects.filter(name__startswith="bench-tick-200-"):
        drop_tenant(tenant, now=timezone.now(), log=lambda line: None)
    assert Tenant.objects.count() == tenants


def test_bench_search_compares_the_default_redis_with_a_cluster_query_by_query(monkeypatch, redis_cluster):
    """`--compare-redis URL`: each query searched on the default Redis and on the cluster in turn;
    the tenant's hot episodes indexed on the cluster from Postgres for it, and gone from it after."""
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "memory_platform.settings")
    masters = [redis_cluster._client(port) for port in redis_cluster.ports()]
    for client in masters:
        client.flushall()  # what earlier tests on the cluster left there
        client.config_resetstat()
    out = io.StringIO()
    call_command(
        "bench",
        "search",
        *("--sizes", "300", "--queries", "10", "--json"),
        *("--compare-redis", redis_cluster.url()),
        stdout=out,
        stderr=io.StringIO(),
    )
    rows = {r["path"]: r for r in json.loads(out.getvalue())["results"]}
    for path in ("service, caller vector", "service, local embedding"):
        default, cluster = rows[f"{path} [default Redis]"], rows[f"{path} [Redis Cluster]"]
        assert default["queries"] == cluster["queries"] == 10
        assert cluster["p95_over_default"] == round(cluster["p95"] / default["p95"], 2)
    # Searched there: every query of both paths, its KNN and its full text (at least), on the cluster.
    searches = sum(
        int(client.info("commandstats").get("cmdstat_FT.SEARCH", {}).get("calls", 0)) for client in masters
    )
    assert searches >= 2 * 2 * 10, searches
    # And nothing of the tenant left there: no document, no index.
    assert sum(client.dbsize() for client in masters) == 0
    assert not any(client.execute_command("FT._LIST") for client in masters)


def test_bench_tick_interrupted_while_loading_drops_its_tenant():
    """Ctrl-C during `bench tick`'s load: exit code 130, one line, the half-loaded tenant dropped."""
    from tests.conftest import interrupt_manage_py

    def loading() -> None:
        assert Tenant.objects.filter(name__startswith="bench-tick-20000-").exists()

    code, out, err = interrupt_manage_py(
        ["bench", "tick", "--episodes", "20000", "--vectors", "0"],
        at=lambda line: "loaded 5000/" in line,
        before=loading,
    )
    assert "loaded 5000/" in out, out + err
    assert code == 130, out + err
    assert "Traceback" not in err and "interrupted: the tenants it loaded were dropped" in err, err
    assert not Tenant.objects.filter(name__startswith="bench-tick-20000-").exists()


def test_bench_search_against_a_revision_asks_both_servers_every_query_and_removes_its_checkout(monkeypatch):
    """`--against REV`: REV's code run from a temporary worktree beside this tree's (a searcher
    process and a web server of each), every query asked of both; the paired difference is the
    median of the per-query differences, inside its interval; the worktree is gone after."""
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "memory_platform.settings")
    root = Path(settings.BASE_DIR)
    before = subprocess.run(
        ["git", "-C", str(root), "worktree", "list"], capture_output=True, text=True
    ).stdout
    out = io.StringIO()
    call_command(
        "bench", "search", "--sizes", "300", "--queries", "10", "--against", "HEAD", "--json",
        stdout=out, stderr=io.StringIO(),
    )  # fmt: skip
    rows = {r["path"]: r for r in json.loads(out.getvalue())["results"]}
    short = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    for kind in ("service", "HTTP"):
        for path in (f"{kind}, caller vector", f"{kind}, local embedding"):
            other, this = rows[f"{path} [{short}]"], rows[f"{path} [this tree]"]
            assert other["queries"] == this["queries"] == 10
            assert this["p95_over_against"] == round(this["p95"] / other["p95"], 2)
            low, high = this["paired_diff_ci95_ms"]
            assert low <= this["paired_median_diff_ms"] <= high
    # The same code on both sides, and no access recorded meanwhile: the same answers, warm-up
    # (20 queries) included, both paths.
    assert rows["service, caller vector [this tree]"]["same_answers"] == [60, 60]
    after = subprocess.run(
        ["git", "-C", str(root), "worktree", "list"], capture_output=True, text=True
    ).stdout
    assert after == before and "bench-against-" not in after
    assert not Tenant.objects.filter(name__startswith="bench-search-300-").exists()


def test_bench_search_against_an_unknown_revision_is_refused_before_loading_anything():
    with pytest.raises(CommandError, match="--against: no such revision here: no-such-rev"):
        call_command("bench", "search", "--sizes", "300", "--against", "no-such-rev", stdout=io.StringIO())
    assert not Tenant.objects.filter(name__startswith="bench-search-").exists()


def test_the_paired_difference_is_the_median_of_the_per_query_differences():
    from retrieval.bench.revisions import paired

    this = [10.0, 12.0, 11.0, 30.0, 10.5]
    other = [9.0, 10.0, 12.0, 10.0, 10.0]  # differences 1, 2, -1, 20, 0.5: median 1
    median, low, high = paired(this, other)
    assert median == 1.0 and low <= 1.0 <= high and low >= -1.0 and high <= 20.0
