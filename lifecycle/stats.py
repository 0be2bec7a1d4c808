"""A tenant's figures, computed once for the console, ``GET /api/v1/stats`` and ``GET /metrics``:
one computation, so every place shows the same numbers.

What Postgres holds is counted there (episodes and turns by layer and state, bytes, compression,
candidates pending, tick runs); what passes without a row (searches and their latency, hits by
layer, unpacks, feedback, turns ingested) comes from ``memory_platform.counters``. Figures "over
the last 24 hours" subtract the hourly snapshot (``TenantSnapshot``) taken a day before ``now``.

The number of statements does not depend on the number of tenants or episodes: every query groups
by tenant (tested for 1 and 20 tenants).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, TypedDict
from uuid import UUID

from django.db.models import Count, Sum
from typing_extensions import Doc

from episodes.models import Episode, Layer
from memory_platform import counters
from memory_platform.conf import memory_settings
from memory_platform.tenancy.models import Tenant

from .models import Candidate, TenantSnapshot, TickRun

LAYERS = (Layer.HOT, Layer.WARM, Layer.COLD)
DAY = timedelta(days=1)

#: A latency quantile in ms (``latency_quantile``), "+Inf" past the last bucket, None without searches.
Quantile = float | Literal["+Inf"] | None


class TickRunSummary(TypedDict):
    id: int
    started_at: str
    status: str
    duration_ms: int | None
    moves: dict[str, int]
    errors: int


class TicksLastDay(TypedDict):
    runs: int
    failed: int
    errors: int
    duration_ms_max: int
    moves: dict[str, int]


class Ticks(TypedDict):
    last: TickRunSummary | None
    last_24h: TicksLastDay


class SearchLatency(TypedDict):
    """A histogram: searches per bucket (by upper bound in ms, "+Inf" past the last), count, sum."""

    buckets: dict[str, float]
    count: float
    sum: float


class Counted(TypedDict):
    """What passes without a row, counted since counting began: searches by path, hits, unpacks
    by layer, feedback by kind (``memory_platform.counters``)."""

    searches: dict[str, int]
    searches_degraded: int
    search_ms: SearchLatency
    hits: dict[str, int]
    unpacks: dict[str, int]
    feedback: dict[str, int]
    turns_ingested: int
    memories_created: int


class CountedLastDay(TypedDict):
    searches: int
    search_ms_p50: Quantile
    search_ms_p95: Quantile
    hits: dict[str, float]
    unpacks: int
    feedback: dict[str, float]
    turns_ingested: float


class TenantStats(TypedDict):
    """A tenant's figures (``GET /stats``); figures by layer are keyed by layer."""

    tenant: str
    at: str
    episodes: Annotated[dict[str, dict[str, int]], Doc("by layer, then by state")]
    episodes_total: int
    turns: dict[str, int]
    raw_chars: dict[str, int]
    bytes: dict[str, int]
    compression: Annotated[dict[str, float | None], Doc("raw characters per packed one, warm and cold")]
    candidates_pending: dict[str, int]
    ticks: Ticks
    counters: Counted
    last_24h: CountedLastDay | None


def tenant_stats(
    tenants: Sequence[Tenant], now: datetime, live: Mapping[str, Mapping[str, counters.Series]] | None = None
) -> dict[UUID, TenantStats]:
    """Each tenant's figures at ``now``, by the tenant's primary key (``live``: the counters when
    the caller has read them already)."""
    ids = [t.pk for t in tenants]
    out: dict[UUID, TenantStats] = {t.pk: _empty(t, now) for t in tenants}

    rows = (
        Episode.objects.filter(tenant_id__in=ids)
        .values("tenant_id", "layer", "state")
        .annotate(
            n=Count("id"),
            turn_sum=Sum("turn_count"),
            raw=Sum("raw_chars"),
            hot=Sum("hot_bytes"),
            packed=Sum("packed_chars"),
        )
    )
    for row in rows:
        stats = out[row["tenant_id"]]
        layer = row["layer"]
        stats["episodes"][layer][row["state"]] = row["n"]
        stats["turns"][layer] += row["turn_sum"] or 0
        stats["raw_chars"][layer] += row["raw"] or 0
        stats["bytes"][layer] += (row["hot"] if layer == Layer.HOT else row["packed"]) or 0
    for stats in out.values():
        stats["episodes_total"] = sum(sum(states.values()) for states in stats["episodes"].values())
        for layer in (Layer.WARM, Layer.COLD):
            packed = stats["bytes"][layer]
            stats["compression"][layer] = round(stats["raw_chars"][layer] / packed, 2) if packed else None

    pending = (
        Candidate.objects.filter(tenant_id__in=ids, status=Candidate.Status.PROPOSED)
        .values("tenant_id", "kind")
        .annotate(n=Count("id"))
    )
    for proposal in pending:
        out[proposal["tenant_id"]]["candidates_pending"][proposal["kind"]] = proposal["n"]

    last_runs = (
        TickRun.objects.filter(tenant_id__in=ids)
        .order_by("tenant_id", "-started_at", "-id")
        .distinct("tenant_id")
    )
    for run in last_runs:
        out[run.tenant_id]["ticks"]["last"] = _run(run)
    for run in TickRun.objects.filter(tenant_id__in=ids, started_at__gt=now - DAY, started_at__lte=now).only(
        "tenant_id", "status", "counts", "errors", "duration_ms"
    ):
        day = out[run.tenant_id]["ticks"]["last_24h"]
        day["runs"] += 1
        day["failed"] += run.status == TickRun.Status.FAILED
        day["errors"] += len(run.errors or [])
        day["duration_ms_max"] = max(day["duration_ms_max"], run.duration_ms or 0)
        for step, moved in (run.counts or {}).items():
            day["moves"][step] = day["moves"].get(step, 0) + moved

    live = live if live is not None else counters.read(ids)
    for pk in ids:
        out[pk]["counters"] = _counters(live[str(pk)])

    day_before = {
        snapshot.tenant_id: snapshot.data
        for snapshot in TenantSnapshot.objects.filter(tenant_id__in=ids, taken_at__lte=now - DAY)
        .order_by("tenant_id", "-taken_at", "-id")
        .distinct("tenant_id")
    }
    for pk in ids:
        out[pk]["last_24h"] = _since(out[pk]["counters"], day_before.get(pk, {}).get("counters"))
    return out


def _empty(tenant: Tenant, now: datetime) -> TenantStats:
    return {
        "tenant": tenant.name,
        "at": now.isoformat(),
        "episodes": {layer: {} for layer in LAYERS},
        "episodes_total": 0,
        "turns": dict.fromkeys(LAYERS, 0),
        "raw_chars": dict.fromkeys(LAYERS, 0),
        "bytes": dict.fromkeys(LAYERS, 0),
        "compression": {Layer.WARM: None, Layer.COLD: None},
        "candidates_pending": {Candidate.Kind.MERGE: 0, Candidate.Kind.DELETE: 0},
        "ticks": {
            "last": None,
            "last_24h": {"runs": 0, "failed": 0, "errors": 0, "duration_ms_max": 0, "moves": {}},
        },
        "counters": _counters({}),  # both read below
        "last_24h": None,
    }


def _run(run: TickRun) -> TickRunSummary:
    return {
        "id": run.pk,
        "started_at": run.started_at.isoformat(),
        "status": run.status,
        "duration_ms": run.duration_ms,
        "moves": run.counts,
        "errors": len(run.errors or []),
    }


def _by(series: counters.Series | None, label: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for labels, value in (series.values if series else {}).items():
        key = dict(labels).get(label, "")
        out[key] = out.get(key, 0) + int(value)
    return out


def _counters(metrics: Mapping[str, counters.Series]) -> Counted:
    """The counted figures since counting began (cumulative; ``last_24h`` has the differences)."""
    latency = counters.histogram(metrics, "search_ms")
    return {
        "searches": _by(metrics.get("searches"), "path"),
        "searches_degraded": int(counters.total(metrics, "searches_degraded")),
        "search_ms": {"buckets": latency.buckets, "count": latency.count, "sum": round(latency.sum, 3)},
        "hits": _by(metrics.get("hits"), "layer"),
        "unpacks": _by(metrics.get("unpacks"), "layer"),
        "feedback": _by(metrics.get("feedback"), "kind"),
        "turns_ingested": int(counters.total(metrics, "turns_ingested")),
        "memories_created": int(counters.total(metrics, "memories_created")),
    }


def _since(current: Counted, before: dict[str, Any] | None) -> CountedLastDay | None:
    """Searches, their latency, hits, unpacks, feedback and ingest since ``before`` (the snapshot a
    day back); None when there is no snapshot that old yet."""
    if before is None:
        return None
    minus = gained
    latency_now, latency_then = current["search_ms"], before.get("search_ms", {})
    buckets = minus(latency_now["buckets"], latency_then.get("buckets", {}))
    count = sum(buckets.values())
    spent = max(0.0, latency_now["sum"] - latency_then.get("sum", 0.0))
    searches = minus(current["searches"], before.get("searches", {}))
    return {
        "searches": int(sum(searches.values())),
        "search_ms_p50": _finite(latency_quantile(buckets, count, spent, 0.5)),
        "search_ms_p95": _finite(latency_quantile(buckets, count, spent, 0.95)),
        "hits": minus(current["hits"], before.get("hits", {})),
        "unpacks": int(sum(minus(current["unpacks"], before.get("unpacks", {})).values())),
        "feedback": minus(current["feedback"], before.get("feedback", {})),
        "turns_ingested": max(0, current["turns_ingested"] - before.get("turns_ingested", 0)),
    }


def gained(now: Mapping[str, float], then: Mapping[str, float]) -> dict[str, float]:
    """What counters gained between two readings; one that went down was reset (a Redis that lost
    its data starts again from zero), so all of its value is new."""
    return {
        key: value - then.get(key, 0) if value >= then.get(key, 0) else value for key, value in now.items()
    }


def _finite(value: float | None) -> Quantile:
    return "+Inf" if value is not None and math.isinf(value) else value


def latency_quantile(buckets: Mapping[str, float], count: float, total_ms: float, q: float) -> float | None:
    """The ``q`` quantile of latencies counted in ``buckets`` (searches per upper bound in ms), in
    ms: interpolated within the bucket that holds it, as Prometheus's ``histogram_quantile`` does,
    rather than that bucket's upper bound (one slow first search read "2500 ms" for a day). When
    every observation is in one bucket, their mean (``total_ms / count``) placed in that bucket:
    the exact value for a single search. None without observations; infinity past the last bound."""
    observed = sum(buckets.values())
    if not observed:
        return None
    bounds = counters.LATENCY_BUCKETS_MS
    lower = dict(zip(bounds, (0.0, *bounds[:-1]), strict=True))
    occupied = [bound for bound, n in buckets.items() if n]
    if len(occupied) == 1 and occupied[0] != "+Inf" and count and total_ms:
        upper = float(occupied[0])
        return round(min(upper, max(lower[upper], total_ms / count)), 1)
    rank, seen = q * observed, 0.0
    for bound in bounds:
        n = buckets.get(f"{bound:g}", 0.0)
        if n and seen + n >= rank:
            return round(lower[bound] + (bound - lower[bound]) * (rank - seen) / n, 1)
        seen += n
    return math.inf


def search_latency(stats: Mapping[str, Any], q: float) -> float | str | None:
    """A quantile of the tenant's search latency in ms (``latency_quantile``): over the last 24
    hours when a day-old snapshot exists, else since counting began."""
    day = stats.get("last_24h")
    if day is not None and day["searches"]:
        return day[f"search_ms_p{round(q * 100)}"]
    latency = stats["counters"]["search_ms"]
    return _finite(latency_quantile(latency["buckets"], latency["count"], latency["sum"], q))


def searches_counted(stats: Mapping[str, Any]) -> tuple[int, bool]:
    """The tenant's searches over the last 24 hours, or since counting began while no day-old
    snapshot exists; and whether the figure is the day's."""
    day = stats.get("last_24h")
    if day is not None:
        return int(day["searches"]), True
    return int(sum(stats["counters"]["searches"].values())), False


def take_snapshots(now: datetime, *, older_than: timedelta | None = None) -> dict[str, int]:
    """One snapshot per active tenant at ``now`` (with ``older_than``: only of the tenants whose
    newest snapshot is older than that, or who have none); those older than
    ``SNAPSHOT_KEEP_DAYS`` go."""
    tenants = list(Tenant.objects.filter(is_active=True).order_by("pk"))
    if older_than is not None:
        # Read apart rather than as a subquery of the tenants' scan: the statement that crosses
        # tenants is the one that says so.
        recent = TenantSnapshot.objects.across_tenants("snapshots: which tenants have a recent one")
        done = set(recent.filter(taken_at__gt=now - older_than).values_list("tenant_id", flat=True))
        tenants = [t for t in tenants if t.pk not in done]
    stats = tenant_stats(tenants, now)
    TenantSnapshot.objects.bulk_create(
        TenantSnapshot(tenant_id=pk, taken_at=now, data=data) for pk, data in stats.items()
    )
    keep = timedelta(days=memory_settings.SNAPSHOT_KEEP_DAYS)
    expired = TenantSnapshot.objects.across_tenants("retention: every tenant's old snapshots")
    removed, _ = expired.filter(taken_at__lt=now - keep).delete()
    return {"taken": len(stats), "removed": removed}
