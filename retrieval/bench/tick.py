"""`bench tick`: the lifecycle tick over one large tenant, or over many small ones, step by step.

Each tenant is loaded as a tenant the tick has been keeping for a while would be: its episodes
spread over the 200 days before the load, each in the layer and state the policy gives it then
(the newest ``hot_quota`` of the ones idle less than ``hot_days`` hot and indexed in Redis, the rest
packed, with their access windows), a few links, a few accesses, a few forgotten. Rows are
written by COPY (``episodes.stores.bulk_copy``), as ingest writes them.

The first tick runs ``days`` after the load: what crossed a threshold meanwhile moves (a day's
worth of a tenant's moves). The second, at the same ``now``, finds nothing left to do: what is left
is the cost of looking at every episode. Step times come from the tick's own hook
(``after:<step>``), so the tick runs unchanged.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.db import connection, connections
from django.utils import timezone

from episodes.indexing import turn_documents
from episodes.models import EMBEDDING_DIM, Episode, Layer, Link, LinkKind, State, Turn, turn_hot_bytes
from episodes.stores.bulk_copy import copy_rows
from episodes.stores.hot import hot_store
from episodes.stores.tables import EPISODES, TURNS
from lifecycle import scoring
from lifecycle.compression import warm_points_for_age
from lifecycle.models import AccessWindow, read_policy
from lifecycle.tick import STEPS, tick_run
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.services import tenant_create
from rights.deletion import drop_tenant

from . import soak_probes
from .text import vocabulary

#: Rows per COPY while loading.
BATCH = 5_000
#: The days a tenant's episodes spread over, the newest at the load.
SPAN_DAYS = 200
#: Episodes per session (under the policy's per-session hot cap, so the cap moves nothing).
SESSION = 20
NAME = "bench-tick"


def _plan(size: int, rng: np.random.Generator, now: datetime, policy: Any) -> dict[str, Any]:
    """Every episode's times, counters, layer and state (oldest first), as the policy puts them at
    ``now``."""
    age = (1.0 - (np.arange(size) + 0.5) / size) * SPAN_DAYS  # days, oldest first
    born = [now - timedelta(days=float(d)) for d in age]
    access = rng.poisson(0.4, size=size)
    accessed_after = rng.uniform(0, 3, size=size) * (access > 0)  # days after its birth
    last_accessed = [
        min(now, b + timedelta(days=float(a))) for b, a in zip(born, accessed_after, strict=True)
    ]
    # A third of the episodes link to an earlier one of their session.
    position = np.arange(size) % SESSION
    linked = (rng.random(size) < 0.3) & (position > 0)
    target = np.where(linked, np.arange(size) - 1 - rng.integers(0, np.maximum(position, 1)), -1)
    in_degree = np.bincount(target[linked], minlength=size)
    layers: list[str] = []
    states: list[str] = []
    for i in range(size):
        stats = scoring.EpisodeStats(
            created_at=born[i],
            first_occurred_at=born[i],
            access_count=int(access[i]),
            last_accessed_at=last_accessed[i],
            last_linked_at=born[i] if linked[i] else None,
            in_degree=int(in_degree[i]),
            out_degree=int(linked[i]),
        )
        layers.append(scoring.layer_for(stats, policy, now))
        states.append(scoring.state_of(stats, policy, now))
    hot = [i for i in range(size) if layers[i] == Layer.HOT]
    for i in hot[: max(0, len(hot) - int(policy.hot_quota))]:  # the quota keeps the newest
        layers[i] = Layer.WARM
    # What the warm gradient has left a packed episode (as many key points as its idle time allows).
    points = [
        warm_points_for_age(max(0.0, (now - t).total_seconds() / 86_400), policy) for t in last_accessed
    ]
    forgotten = rng.random(size) < 0.0005
    return {
        "born": born,
        "access": access,
        "last_accessed": last_accessed,
        "linked": linked,
        "target": target,
        "points": points,
        "layers": layers,
        "states": [State.FORGOTTEN if forgotten[i] else states[i] for i in range(size)],
        "forgotten_days": rng.uniform(0, 2 * policy.purge_grace_days, size=size),
    }


def load_tenant(
    size: int,
    rng: np.random.Generator,
    now: datetime,
    log: Callable[[str], None],
    loaded: list[Tenant],
    *,
    vectors_share: float = 1.0,
) -> Tenant:
    """A tenant of ``size`` one-turn episodes laid out as the module says; appended to ``loaded``
    before its first row, so an interrupted load is dropped with the rest. Every hot episode has a
    vector, and ``vectors_share`` of the packed ones (inserting them into the packed HNSW graph is
    most of a large load's time)."""
    tenant = tenant_create(name=f"{NAME}-{size}-{uuid.uuid4().hex[:8]}", embedder="provided")
    loaded.append(tenant)
    policy = read_policy(tenant)
    plan = _plan(size, rng, now, policy)
    vocabulary_words, p = vocabulary()
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    topics = rng.normal(size=(max(10, size // 50), EMBEDDING_DIM)).astype(np.float32)
    store = hot_store()
    for offset in range(0, size, BATCH):
        n = min(BATCH, size - offset)
        vectors = topics[rng.integers(0, len(topics), size=n)] + 0.5 * rng.normal(size=(n, EMBEDDING_DIM))
        vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
        with_vector = rng.random(n) < vectors_share
        words = vocabulary_words[np.searchsorted(cdf, rng.random((n, 12)))]
        episodes, turns = [], []
        for k in range(n):
            i = offset + k
            text = f"note {i}: " + " ".join(words[k])
            layer, state, born = plan["layers"][i], plan["states"][i], plan["born"][i]
            packed = layer != Layer.HOT
            episodes.append(
                Episode(
                    tenant=tenant,
                    kind="note",
                    title=text[:60],
                    session_id=f"s{i // SESSION}",
                    layer=layer,
                    state=state,
                    summary=text if packed else "",
                    key_points=[text] * plan["points"][i] if packed else [],
                    headline=text[:60] if layer == Layer.COLD else "",
                    first_occurred_at=born,
                    last_occurred_at=born,
                    created_at=born,
                    last_accessed_at=plan["last_accessed"][i],
                    access_count=int(plan["access"][i]),
                    last_linked_at=born if plan["linked"][i] else None,
                    turn_count=1,
                    embedding=vectors[k] if not packed or with_vector[k] else None,
                    search_text=text if layer != Layer.COLD else text[:60],
                    raw_chars=len(text),
                    hot_bytes=turn_hot_bytes(text),
                    packed_chars=len(text) if packed else 0,
                    forgotten_at=(
                        now - timedelta(days=float(plan["forgotten_days"][i]))
                        if state == State.FORGOTTEN
                        else None
                    ),
                    state_before_forget=State.DORMANT if state == State.FORGOTTEN else "",
                )
            )
            turns.append(
                Turn(
                    tenant=tenant,
                    session_id=f"s{i // SESSION}",
                    seq=i % SESSION,
                    role="user",
                    text=text,
                    occurred_at=born,
                    ingested_at=born,
                    embedding=None if packed else vectors[k],
                )
            )
        copy_rows(episodes)
        for episode, turn in zip(episodes, turns, strict=True):
            turn.episode_id = episode.pk
        copy_rows(turns)
        # BATCH is a multiple of SESSION: a link's two ends are in the same batch.
        links = [
            Link(
                tenant=tenant,
                src_id=episodes[k].pk,
                dst_id=episodes[int(plan["target"][offset + k]) - offset].pk,
                kind=LinkKind.RELATED,
                created_at=plan["born"][offset + k],
            )
            for k in range(n)
            if plan["linked"][offset + k]
        ]
        copy_rows(links)
        copy_rows(
            [
                AccessWindow(
                    tenant=tenant,
                    episode_id=e.pk,
                    started_at=now - timedelta(days=float(rng.uniform(0, 1))),
                    access_count_at_start=e.access_count,
                )
                for e in episodes
                if e.layer != Layer.HOT and e.state != State.FORGOTTEN
            ]
        )
        hot = [
            (e, t)
            for e, t in zip(episodes, turns, strict=True)
            if e.layer == Layer.HOT and e.state != State.FORGOTTEN
        ]
        if hot:
            store.index_episodes([(e, turn_documents(e, [t])) for e, t in hot])
        if size > BATCH:
            log(f"  {tenant.name}: loaded {offset + n}/{size} episodes")
    return tenant


class _StepClock:
    """The tick's hook: adds the time since the last step ended to the step that just ended."""

    def __init__(self, steps: dict[str, float]) -> None:
        self.steps = steps
        self.mark = time.perf_counter()

    def __call__(self, label: str) -> None:
        if label.startswith("after:"):
            at = time.perf_counter()
            step = label.removeprefix("after:")
            self.steps[step] = self.steps.get(step, 0.0) + at - self.mark
            self.mark = at


def _tick_in_processes(tenants: list[Tenant], now: datetime, workers: int) -> dict[str, Any]:
    """``_tick_all`` shared among ``workers`` processes, as ``make run``'s worker processes share the
    tenants' tick tasks: the total is the wall time until the last finishes; the steps' seconds,
    the counts and the statuses are summed over the processes, the slowest tenant is the slowest
    of any."""
    if workers <= 1 or len(tenants) <= 1:
        return _tick_all(tenants, now)
    connections.close_all()  # each process opens its own (a forked connection is not shared)
    shares = [tenants[k::workers] for k in range(workers)]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
        parts = list(pool.map(_tick_share, shares, [now] * workers))
    total = time.perf_counter() - started
    steps: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    for part in parts:
        steps.update(part["steps"])
        counts.update(part["counts"])
        statuses.update(part["statuses"])
    slowest = max(part["slowest_tenant"] for part in parts)
    return _figures(now, steps, total, slowest, counts, statuses, processes=workers)


def _tick_share(tenants: list[Tenant], now: datetime) -> dict[str, Any]:
    try:
        return _tick_all(tenants, now)
    finally:
        connections.close_all()


def _tick_all(tenants: list[Tenant], now: datetime) -> dict[str, Any]:
    """One tick of each tenant at ``now``: seconds per step summed over the tenants, the total, the
    counts the runs recorded, and the statuses."""
    steps: dict[str, float] = {}
    counts: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    started = time.perf_counter()
    slowest = 0.0
    for tenant in tenants:
        hook = _StepClock(steps)
        began = time.perf_counter()
        run = tick_run(tenant=tenant, now=now, hook=hook)
        slowest = max(slowest, time.perf_counter() - began)
        counts.update(run.counts)
        statuses[str(run.status)] += 1
    return _figures(now, steps, time.perf_counter() - started, slowest, counts, statuses, processes=1)


def _figures(
    now: datetime,
    steps: Mapping[str, float],
    total: float,
    slowest: float,
    counts: Counter[str],
    statuses: Counter[str],
    *,
    processes: int,
) -> dict[str, Any]:
    return {
        "now": now.isoformat(),
        "steps": {step: round(steps.get(step, 0.0), 3) for step in STEPS},
        "total": round(total, 3),
        "slowest_tenant": round(slowest, 3),
        "counts": dict(sorted(counts.items())),
        "statuses": dict(statuses),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "processes": processes,
    }


def run_tick_bench(
    *,
    episodes: int,
    tenants: int,
    days: float,
    seed: int,
    log: Callable[[str], None],
    vectors_share: float = 1.0,
    workers: int = 1,
    keep: bool = False,
    reuse: bool = False,
) -> dict[str, Any]:
    """Load ``tenants`` tenants of ``episodes`` episodes, tick each twice ``days`` after the load
    (the tenants shared among ``workers`` processes), and drop them (also when interrupted) unless
    ``keep``. ``reuse``: tick the tenants of this size an earlier ``keep`` run left (loading only
    those missing), ``days`` after now; their earlier ticks have moved what was due then."""
    rng = np.random.default_rng(seed)
    kept = kept_tenants(episodes)[:tenants] if reuse else []
    loaded: list[Tenant] = []
    now = timezone.now()
    try:
        if kept:
            log(f"reusing {len(kept)} kept tenant(s) of {episodes} episodes")
        log(f"loading {tenants - len(kept)} tenant(s) of {episodes} episodes")
        began = time.perf_counter()
        for k in range(tenants - len(kept)):
            load_tenant(episodes, rng, now, log, loaded, vectors_share=vectors_share)
            if tenants > 1 and (k + 1) % max(1, tenants // 20) == 0:
                log(f"  loaded {k + 1}/{tenants - len(kept)} tenants")
        with connection.cursor() as cursor:
            # Fresh planner statistics, as autovacuum leaves them after a bulk load.
            cursor.execute(f"ANALYZE {EPISODES}, {TURNS}")
        load_seconds = round(time.perf_counter() - began, 1)
        ticked = kept + loaded
        at = (timezone.now() if kept else now) + timedelta(days=days)
        database = _database()
        log(f"database: {database}")
        log("first tick")
        first = _tick_in_processes(ticked, at, workers)
        log(f"  {_summary(first)}")
        log("second tick")
        second = _tick_in_processes(ticked, at, workers)
        log(f"  {_summary(second)}")
        return {
            "episodes": episodes,
            "tenants": tenants,
            "days": days,
            "vectors_share": vectors_share,
            "workers": workers,
            "reused": len(kept),
            "load_seconds": load_seconds,
            "database": database,
            "ticks": {"first": first, "second": second},
        }
    finally:
        if keep or reuse:
            log(f"keeping {len(kept) + len(loaded)} tenant(s) (bench tick --reuse ticks them again)")
        else:
            log(f"dropping {len(loaded)} tenant(s)")
            for tenant in loaded:
                drop_tenant(tenant, now=timezone.now(), log=lambda line: None)


def _database() -> dict[str, Any]:
    """What the moves will write into, as the first tick starts: the dead rows of the tables and
    the size of the HNSW graphs (a graph holds every dead row until a vacuum reaches it, and a
    move's row is inserted into it again: a bloated graph makes each move slower)."""
    return {"dead_tuples": soak_probes.dead_tuples()["total"], "hnsw_mb": soak_probes.hnsw()["by_index"]}


def kept_tenants(episodes: int) -> list[Tenant]:
    """The tenants of ``episodes`` episodes a ``keep`` run left, oldest first."""
    return list(Tenant.objects.filter(name__startswith=f"{NAME}-{episodes}-").order_by("created_at"))


def _summary(tick: dict[str, Any]) -> str:
    """A tick's figures in a line, logged before the tenants are dropped (a large one takes minutes)."""
    steps = " ".join(f"{step} {seconds:.2f}" for step, seconds in tick["steps"].items())
    return f"total {tick['total']:.2f} s: {steps}; load average {tick['load_average']}"


def format_table(result: dict[str, Any]) -> str:
    ticks = result["ticks"]
    lines = [
        f"{result['tenants']} tenant(s) x {result['episodes']} episodes, ticked {result['days']:g} day(s) "
        f"after the load, {result['vectors_share']:.0%} of packed episodes with a vector, "
        f"{result['workers']} process(es) (loaded in {result['load_seconds']} s"
        f"{', ' + str(result['reused']) + ' reused' if result.get('reused') else ''}); total: wall seconds, "
        "steps: seconds summed over the processes",
        f"{'step':<16}{'first s':>10}{'second s':>10}",
    ]
    for step in STEPS:
        lines.append(
            f"{step:<16}{ticks['first']['steps'][step]:>10.2f}{ticks['second']['steps'][step]:>10.2f}"
        )
    lines.append(f"{'total':<16}{ticks['first']['total']:>10.2f}{ticks['second']['total']:>10.2f}")
    database = result["database"]
    lines.append(
        f"before the first tick: {database['dead_tuples']:,} dead tuples, HNSW MB {database['hnsw_mb']}"
    )
    for label in ("first", "second"):
        tick = ticks[label]
        lines.append(
            f"{label}: {tick['counts']} {tick['statuses']} slowest tenant {tick['slowest_tenant']} s, "
            f"load average {tick['load_average']}"
        )
    return "\n".join(lines)
