"""The home's row per tenant: its health as an operator reads it, from ``lifecycle.stats`` (the
figures ``GET /stats`` and ``/metrics`` show) and the limits of the tenant's policy (its hot
quota, its tick interval: read with the policy rows by the site, ``console.site.policy_limits``).
A handful of statements for any number of tenants: each query groups by tenant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models import Count

from episodes.models import Episode
from lifecycle.stats import LAYERS, TenantStats, search_latency, searches_counted, tenant_stats
from memory_platform.tenancy.models import Tenant

#: A tick is late once it has not run for this many of its intervals (and at least LATE_MINUTES).
LATE_INTERVALS = 2
LATE_MINUTES = 15


def tenant_rows(
    tenants: Sequence[Tenant] | Any,
    now: datetime,
    limits: Mapping[Any, Mapping[str, Any]],
    stats: Mapping[Any, TenantStats] | None = None,
) -> list[dict[str, Any]]:
    """The home's row for each tenant (sortable by each key but ``tenant`` and ``problems``);
    ``limits``: each tenant's ``hot_quota_bytes`` and ``tick_interval_minutes``."""
    tenants = list(tenants)
    ids = [tenant.pk for tenant in tenants]
    stats = stats if stats is not None else tenant_stats(tenants, now)
    backlog = dict(
        Episode.objects.filter(tenant_id__in=ids, needs_reindex=True)
        .order_by()
        .values("tenant_id")
        .annotate(n=Count("pk"))
        .values_list("tenant_id", "n")
    )
    return [
        _row(tenant, stats[tenant.pk], limits.get(tenant.pk, {}), backlog.get(tenant.pk, 0), now)
        for tenant in tenants
    ]


def _row(
    tenant: Tenant, figures: TenantStats, policy: Mapping[str, Any], backlog: int, now: datetime
) -> dict[str, Any]:
    by_layer: dict[str, int] = {str(layer): sum(figures["episodes"][layer].values()) for layer in LAYERS}
    searches, over_day = searches_counted(figures)
    last = figures["ticks"]["last"]
    last_at = datetime.fromisoformat(last["started_at"]) if last else None
    interval = int(policy.get("tick_interval_minutes") or 0)
    lag = int((now - last_at).total_seconds() // 60) if last_at else None
    late = bool(
        tenant.is_active
        and interval
        and (lag if lag is not None else int((now - tenant.created_at).total_seconds() // 60))
        > max(LATE_MINUTES, LATE_INTERVALS * interval)
    )
    quota = int(policy.get("hot_quota_bytes") or 0)
    hot_bytes = figures["bytes"]["hot"]
    quota_share = round(100 * hot_bytes / quota) if quota else None
    degraded = figures["counters"]["searches_degraded"]
    errors = figures["ticks"]["last_24h"]["errors"] + figures["ticks"]["last_24h"]["failed"]
    problems = [
        text
        for text, present in (
            ("inactive", not tenant.is_active),
            ("last tick failed", bool(last and last["status"] == "failed")),
            ("tick late", late),
            (f"{backlog} episode(s) waiting for the hot index", backlog > 0),
            ("over its hot quota", quota_share is not None and quota_share > 100),
            (f"{degraded} degraded search(es)", degraded > 0),
        )
        if present
    ]
    return {
        "tenant": tenant,
        "name": tenant.name,
        **by_layer,
        "hot_bytes": hot_bytes,
        "quota_bytes": quota,
        "quota_share": quota_share,
        "searches": searches,
        "searches_over_day": over_day,
        "p95": search_latency(figures, 0.95),
        "last_tick": last_at,
        "last_tick_status": last["status"] if last else "",
        "tick_lag": lag,
        "tick_interval": interval,
        "tick_late": late,
        "tick_errors": errors,
        "backlog": backlog,
        "degraded": degraded,
        "pending": sum(figures["candidates_pending"].values()),
        "problems": problems,
    }
