"""`bench search`: search latency at 10k / 100k episodes, through the service and over HTTP.

Episodes are bulk-loaded with precomputed vectors (clustered unit vectors, synthetic
text with a Zipf word distribution, see `text.py`), written to Postgres and indexed hot in Redis, exactly as ingest would leave them. Queries
run with a caller vector and with the local query embedding (the server embeds the text). HTTP
runs against a gunicorn started for the run on a free loopback port.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from episodes.indexing import turn_documents
from episodes.models import EMBEDDING_DIM, Episode, Turn
from episodes.stores.bulk_copy import copy_rows
from episodes.stores.hot import hot_store
from episodes.stores.tables import EPISODES, TURNS
from memory_platform import db
from memory_platform.embeddings import get_embedder
from memory_platform.redis_client import get_redis
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.services import api_key_create, tenant_create
from retrieval import usage
from retrieval.query import SearchQuery
from retrieval.services import search
from rights.deletion import drop_tenant

from . import cpu, deployments, revisions
from .floor import measure_floor
from .load import load_rows
from .server import MAKE_RUN_WORKERS, Server, measure_http
from .text import sentence

BATCH = 2000
#: Connections writing the load's batches at once.
LOAD_WRITERS = 2


def planned_layers(size: int, hot_quota: int) -> list[str]:
    """The layer of each of a load's ``size`` episodes, oldest first: the newest ``hot_quota`` hot
    (the policy bounds the hot tier), the rest packed, two warm for one cold."""
    hot_from = size - min(size, hot_quota)
    return ["hot" if i >= hot_from else ("warm" if i % 3 else "cold") for i in range(size)]


def write_batch(
    tenant: Tenant,
    offset: int,
    texts: Sequence[str],
    vectors: np.ndarray,
    when: Sequence[datetime],
    layers: Sequence[str],
    now: datetime,
) -> None:
    """One batch of a load: one-turn episodes ``offset``.. holding ``texts`` with ``vectors`` (own
    and window: a one-turn episode's window is the turn itself), in ``layers``, written by COPY as
    ingest writes them; the hot ones indexed in Redis."""
    episodes = [
        Episode(
            tenant=tenant,
            kind="note",
            title=text[:60],
            session_id=f"s{(offset + i) // 100}",
            layer=layer,
            summary=text if layer != "hot" else "",
            key_points=[text] if layer != "hot" else [],
            headline=text[:60] if layer == "cold" else "",
            first_occurred_at=when[i],
            last_occurred_at=when[i],
            last_accessed_at=now,
            turn_count=1,
            embedding=vectors[i],
            search_text=text if layer != "cold" else text[:60],
            raw_chars=len(text),
        )
        for i, (text, layer) in enumerate(zip(texts, layers, strict=True))
    ]
    copy_rows(episodes)
    turns = [
        Turn(
            tenant=tenant,
            episode=e,
            session_id=e.session_id,
            seq=0,
            role="memory",
            text=texts[i],
            occurred_at=e.first_occurred_at,
            ingested_at=now,
            embedding=vectors[i],
            context_embedding=vectors[i],
        )
        for i, e in enumerate(episodes)
    ]
    copy_rows(turns)
    hot = [(e, t) for e, t in zip(episodes, turns, strict=True) if e.layer == "hot"]
    if hot:
        hot_store().index_episodes(
            [(e, turn_documents(e, [t])) for e, t in hot], new=[e.pk for e in episodes]
        )


def load_tenant(size: int, rng: np.random.Generator, log: Callable[[str], None]) -> tuple[Tenant, np.ndarray]:
    """A tenant of ``size`` episodes of one turn each, laid out by ``planned_layers``, written by
    COPY (``episodes.stores.bulk_copy``); the hot ones indexed in Redis a batch at a time. Logs how
    long it took and what the database and Redis grew by."""
    from lifecycle.models import read_policy

    started, disk_before, ram_before = time.perf_counter(), _database_bytes(), _redis_bytes()
    # A `local` tenant, so a query without a vector is embedded by the server; the load itself
    # writes precomputed vectors (own and window) so no model runs while loading.
    tenant = tenant_create(name=f"bench-search-{size}-{uuid.uuid4().hex[:6]}", embedder="local")
    planned = planned_layers(size, int(read_policy(tenant).hot_quota))
    topics = rng.normal(size=(max(10, size // 50), EMBEDDING_DIM)).astype(np.float32)
    now = timezone.now()
    start = now - timedelta(days=200)
    vectors_all = np.empty((size, EMBEDDING_DIM), dtype=np.float32)

    # The batches are drawn here, in order (one random generator), and written by LOAD_WRITERS
    # connections at once: inserting into the HNSW graphs keeps one Postgres process busy.
    pending: deque[tuple[Future[None], int]] = deque()
    written = 0
    pool = ThreadPoolExecutor(max_workers=LOAD_WRITERS, thread_name_prefix="bench-load")
    try:
        for offset in range(0, size, BATCH):
            n = min(BATCH, size - offset)
            topic_ids = rng.integers(0, len(topics), size=n)
            vectors = topics[topic_ids] + 0.5 * rng.normal(size=(n, EMBEDDING_DIM)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors_all[offset : offset + n] = vectors
            texts = [f"note {offset + i}: " + sentence(rng, 20) for i in range(n)]
            when = [start + timedelta(seconds=(200 * 86400 // size) * (offset + i)) for i in range(n)]
            layers = planned[offset : offset + n]
            pending.append(
                (pool.submit(db.in_worker, write_batch, tenant, offset, texts, vectors, when, layers, now), n)
            )
            while len(pending) >= LOAD_WRITERS or (pending and offset + n == size):
                future, count = pending.popleft()
                future.result()
                written += count
                log(f"  loaded {written}/{size} episodes ({written / (time.perf_counter() - started):.0f}/s)")
    except BaseException:  # Ctrl-C or an error half-way: no partly loaded tenant is left behind
        pool.shutdown(wait=True, cancel_futures=True)
        drop_tenant(tenant, now=timezone.now(), log=lambda line: log(f"  {line}"))
        raise
    finally:
        pool.shutdown(wait=True)
        db.close_worker_connections()
    # Fresh planner statistics, as autovacuum leaves them after a bulk load: with none for the new
    # tenant, Postgres may scan its rows exactly instead of through the HNSW graph.
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {EPISODES}, {TURNS}")
    log(
        f"  loaded in {time.perf_counter() - started:.0f} s; the database grew by "
        f"{(_database_bytes() - disk_before) / 2**20:.0f} MB, Redis's memory by "
        f"{(_redis_bytes() - ram_before) / 2**20:.0f} MB"
    )
    return tenant, vectors_all


def _database_bytes() -> int:
    return int(db.fetch("SELECT pg_database_size(current_database())", tenant=None)[0][0])


def _redis_bytes() -> int:
    return int(get_redis().info("memory")["used_memory"])


def _percentiles(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values)
    return {p: round(float(np.percentile(arr, q)), 2) for p, q in (("p50", 50), ("p95", 95), ("p99", 99))}


def _queries(rng: np.random.Generator, vectors: np.ndarray, count: int) -> list[tuple[str, list[float]]]:
    out = []
    for _ in range(count):
        v = vectors[rng.integers(0, len(vectors))] + 0.2 * rng.normal(size=EMBEDDING_DIM).astype(np.float32)
        v /= np.linalg.norm(v)
        out.append((sentence(rng, 6), v.tolist()))
    return out


def measure_service(tenant: Tenant, queries: list[tuple[str, list[float]]], with_vector: bool) -> list[float]:
    """Time `search()`; without a caller vector the service embeds the text (a `local` tenant).
    Accesses are queued after each timed call, as the API queues them after answering."""
    times = []
    for text, vector in queries:
        q = SearchQuery(
            text=text,
            vector=np.asarray(vector, dtype=np.float32) if with_vector else None,
            limit=10,
            record_access=False,
        )
        now = timezone.now()
        started = time.perf_counter()
        result = search(tenant=tenant, query=q, now=now)
        times.append((time.perf_counter() - started) * 1000)
        # As the API does: the accesses are queued after the answer, outside its time, and written
        # many searches at a time (``usage.recorder``).
        usage.recorder.add(tenant.id, [h.episode.pk for h in result.hits], now)
    return times


def reuse_tenant(size: int, log: Callable[[str], None]) -> tuple[Tenant, np.ndarray] | None:
    """A bench tenant of this size kept by an earlier `--keep` run, with its episode vectors, if it
    is still laid out as it was loaded. A scheduler's tick (`make run`'s worker ticks every
    tenant) moves a kept tenant's episodes out of hot, and a search over it then measures another
    mixture of tiers than the one the table names."""
    from lifecycle.models import read_policy

    for tenant in Tenant.objects.filter(name__startswith=f"bench-search-{size}-").order_by("-created_at"):
        found = Counter(
            dict(Episode.objects.filter(tenant=tenant).values_list("layer").annotate(n=Count("id")))
        )
        if found.total() != size:
            continue
        planned = Counter(planned_layers(size, int(read_policy(tenant).hot_quota)))
        if found != planned:
            log(
                f"not reusing {tenant.name}: its layers changed since it was loaded "
                f"({_layers(found)} instead of {_layers(planned)})"
            )
            continue
        return tenant, _sampled_vectors(tenant, size)
    return None


#: The queries of a reused tenant are drawn near this many of its episodes, evenly spread: every
#: episode's vector as Python objects would take gigabytes at a million.
REUSE_SAMPLE = 20_000


def _sampled_vectors(tenant: Tenant, size: int) -> np.ndarray:
    """The vectors of about ``REUSE_SAMPLE`` of the tenant's episodes, every n-th by id."""
    ids = [
        pk
        for (pk,) in db.fetch(
            f"SELECT id FROM {EPISODES} WHERE tenant_id = %s ORDER BY id", [tenant.pk], tenant=tenant
        )
    ]
    rows = db.fetch(
        f"SELECT embedding FROM {EPISODES} WHERE tenant_id = %s AND id = ANY(%s) AND embedding IS NOT NULL "
        "ORDER BY id",
        [tenant.pk, ids[:: max(1, size // REUSE_SAMPLE)]],
        tenant=tenant,
    )
    return db.vector_rows([v for (v,) in rows])


def _layers(counts: Counter[str]) -> str:
    return ", ".join(f"{counts[layer]} {layer}" for layer in ("hot", "warm", "cold"))


def run_search_bench(
    *,
    sizes: list[int],
    queries: int,
    seed: int,
    keep: bool,
    log: Callable[[str], None],
    reuse: bool = False,
    compare_redis: str | None = None,
    against: str | None = None,
    clients: Sequence[int] = (),
    seconds: float = 15.0,
    url: str | None = None,
) -> list[dict[str, Any]]:
    """``against``: a git revision whose search is timed beside this tree's, query by query, in the
    service and over HTTP (``revisions``). ``clients``: loads of that many concurrent clients over
    HTTP, ``seconds`` each (``load``), against ``url`` or the run's own web server."""
    with contextlib.ExitStack() as stack:
        other = stack.enter_context(revisions.checkout(against, log)) if against else None
        return _run(
            sizes, queries, seed, keep, log, reuse, compare_redis, other, (list(clients), seconds, url)
        )


def _run(
    sizes: list[int],
    queries: int,
    seed: int,
    keep: bool,
    log: Callable[[str], None],
    reuse: bool,
    compare_redis: str | None,
    against: tuple[Path, str] | None,
    load: tuple[list[int], float, str | None] = ([], 0.0, None),
) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    get_embedder("local").embed(["warm-up"])
    results = []
    loaded: list[Tenant] = []
    server = Server()
    servers = [server]
    try:
        if against is not None:
            log(f"  starting a web server on {against[1]}'s code")
            servers.append(Server(root=against[0]))
        for size in sizes:
            kept = reuse_tenant(size, log) if reuse else None
            if kept is not None:
                tenant, vectors = kept
                log(f"reusing {tenant.name} ({size} episodes)")
            else:
                log(f"loading {size} episodes")
                tenant, vectors = load_tenant(size, rng, log)
                if not keep:
                    # Dropped at the end even when a later step is interrupted (Ctrl-C, an error):
                    # a half-measured tenant is not left behind for the scheduler to tick.
                    loaded.append(tenant)
            _, secret = api_key_create(
                tenant=tenant, name="bench", scopes=["read"], actor="cli", now=timezone.now()
            )
            # Warm-up queries are not measured, and measured queries are never repeats of them.
            qs = _queries(rng, vectors, queries + 20)
            warm, qs = qs[:20], qs[20:]
            measure_service(tenant, warm, True)
            measure_http(server.port, secret, warm, True)
            measure_http(server.port, secret, warm, False)
            measured = []
            for label, over_http, with_vector in (
                ("service, caller vector", False, True),
                ("service, local embedding", False, False),
                ("HTTP, caller vector", True, True),
                ("HTTP, local embedding", True, False),
            ):
                log(f"  measuring {label}")
                # What the searches cost every process: the platform's Python is this process on
                # the service paths, the web server's over HTTP (the client's is not counted).
                if over_http:
                    times, spent = cpu.measured(
                        len(qs), measure_http, server.port, secret, qs, with_vector, platform=server.proc.pid
                    )
                else:
                    times, spent = cpu.measured(len(qs), measure_service, tenant, qs, with_vector)
                measured.append((label, with_vector, _percentiles(times), spent))
            log("  measuring the floor: the embedding, Redis and Postgres alone")
            floor = measure_floor(tenant, qs)
            floors = {True: _percentiles(floor.stores()), False: _percentiles(floor.with_embedding())}
            floor_cpu = {
                True: cpu.summed([spent for name, spent in floor.cpu.items() if name != "embedding"]),
                False: cpu.summed(list(floor.cpu.values())),
            }
            for label, with_vector, figures, spent in measured:
                ratio = (
                    round(figures["p95"] / floors[with_vector]["p95"], 2)
                    if floors[with_vector]["p95"]
                    else None
                )
                row = {
                    "episodes": size,
                    "path": label,
                    "queries": len(qs),
                    **figures,
                    "p95_ms": figures["p95"],
                    "floor_p95_ms": floors[with_vector]["p95"],
                    "ratio_to_floor": ratio,
                }
                row.update(cpu.compared(spent, floor_cpu[with_vector]))
                results.append(row)
            for label, times, part_cpu in (
                ("floor: embedding", floor.embedding, floor.cpu.get("embedding")),
                ("floor: hot (Redis)", floor.hot, floor.cpu.get("hot")),
                ("floor: packed (Postgres)", floor.packed, floor.cpu.get("packed")),
                ("floor: slower store", floor.stores(), None),
                ("floor: + embedding", floor.with_embedding(), None),
            ):
                if times:  # nothing packed: no Postgres statement to time
                    part: dict[str, Any] = {"episodes": size, "path": label, "queries": len(qs)}
                    part.update(_percentiles(times))
                    if part_cpu is not None:
                        part["cpu_ms"] = part_cpu
                    results.append(part)
            if against is not None:
                ports = (server.port, servers[1].port)
                results.extend(
                    revisions.measure(size, tenant, secret, warm, qs, against, ports, _percentiles, log)
                )
            if load[0]:
                results.extend(_loads(size, secret, qs, load, log))
            if compare_redis:
                log(f"  measuring the service on the default Redis and on {deployments.kind(compare_redis)}")
                times_on = deployments.compare(tenant, qs, compare_redis, log)
                results.extend(deployments.rows(size, compare_redis, times_on, _percentiles))
    finally:
        try:
            for each in servers:
                each.stop()
        finally:
            # Dropped once every size is measured: deleting a loaded tenant sets autovacuum and
            # RediSearch's collector to work, which would slow the next size's measurements. The
            # deletion service waits for the tenant's tick and tries a deadlocked transaction
            # again, so it works beside a running platform (``rights.deletion``).
            for tenant in loaded:
                drop_tenant(tenant, now=timezone.now(), log=lambda line: log(f"  {line}"))
    return results


def _loads(
    size: int,
    secret: str,
    queries: list[tuple[str, list[float]]],
    load: tuple[list[int], float, str | None],
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """The ``--clients`` loads, against ``--url`` or a web server started for them as `make run`
    serves."""
    clients, seconds, url = load
    if url:
        return load_rows(size, url, secret, queries, clients, seconds, log)
    log(f"  starting a web server of {MAKE_RUN_WORKERS} workers, as make run serves, for the load")
    served = Server(workers=MAKE_RUN_WORKERS)
    try:
        return load_rows(size, f"http://127.0.0.1:{served.port}", secret, queries, clients, seconds, log)
    finally:
        served.stop()


def format_table(rows: list[dict[str, Any]]) -> str:
    """The platform's paths with their p95 over the floor's (the slower store, plus the embedding
    where the platform embeds), then the floor's parts; where it was read, the processor time of
    every process per search, and the service's over the floor's parts summed."""
    width = max(26, *(len(r["path"]) + 1 for r in rows))
    head = (
        f"{'episodes':>9}  {'path':<{width}}{'queries':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}"
        f"{'p95/floor':>15}{'cpu ms':>9}{'cpu/floor':>11}"
    )
    lines = [head]
    for r in rows:
        ratio = r.get("ratio_to_floor")
        over = r.get("p95_over_default")
        shown = f"{ratio}x" if ratio is not None else f"{over}x default" if over is not None else ""
        if "paired_median_diff_ms" in r:
            low, high = r["paired_diff_ci95_ms"]
            shown = f"{r['p95_over_against']}x; paired {r['paired_median_diff_ms']:+} ms [{low:+}, {high:+}]"
            if "same_answers" in r:
                shown += "; same answers {}/{}".format(*r["same_answers"])
        spent = (r.get("cpu_ms") or {}).get("total")
        cpu_ratio = r.get("cpu_ratio_to_floor")
        lines.append(
            f"{r['episodes']:>9}  {r['path']:<{width}}{r['queries']:>8}{r['p50']:>9}{r['p95']:>9}{r['p99']:>9}"
            f" {shown:>14}{spent if spent is not None else '':>9}"
            f"{f'{cpu_ratio}x' if cpu_ratio is not None else '':>11}"
        )
    return "\n".join(lines)
