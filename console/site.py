"""The operator console: Django's admin titled "Memory platform", whose home is one row per tenant
and whose tenant dashboard charts the hourly snapshots
(docs/decisions/0028-console-figures-and-preview.md).

Every figure comes from ``lifecycle.stats`` (the same numbers as ``GET /api/v1/stats`` and
``GET /metrics``); charts are inline SVG (``console.charts``). "Run a tick now" queues the tick
on the task worker, never on the request thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin, messages
from django.db.models.base import ModelBase
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST

from episodes.models import Layer
from lifecycle.models import MemoryPolicy, TenantSnapshot, TickRun
from lifecycle.stats import LAYERS, gained, search_latency, tenant_stats
from memory_platform import counters
from memory_platform.admin_base import SuperusersOnly, visible_tenants
from memory_platform.tenancy.models import Tenant

from .charts import Point, line_chart

#: The home's columns: (key, heading); sortable by ``?sort=<key>`` (``-<key>`` descending).
COLUMNS = (
    ("name", "Tenant"),
    ("hot", "Hot"),
    ("warm", "Warm"),
    ("cold", "Cold"),
    ("searches_day", "Searches / 24 h"),
    ("p95", "Search p95 (ms)"),
    ("last_tick", "Last tick"),
    ("tick_errors", "Tick errors (24 h)"),
    ("pending", "Candidates pending"),
)
CHART_DAYS = 14
#: Apps whose pages only a superuser sees (``SuperusersOnly``): django-q's tasks, schedules and
#: failures hold every tenant's task arguments and results, and no tenant column to scope them by.
SUPERUSER_APPS = frozenset({"django_q"})


class ConsoleSite(admin.AdminSite):
    site_header = "Memory platform"
    site_title = "Memory platform"
    index_title = "Tenants"
    index_template = "admin/console_index.html"

    def register(self, model_or_iterable: Any, admin_class: Any = None, **options: Any) -> None:
        models: list[Any] = (
            [model_or_iterable] if isinstance(model_or_iterable, ModelBase) else list(model_or_iterable)
        )
        for model in models:
            own = admin_class or admin.ModelAdmin
            if model._meta.app_label in SUPERUSER_APPS and not issubclass(own, SuperusersOnly):
                own = type(own.__name__, (SuperusersOnly, own), {})
            super().register(model, own, **options)

    def get_urls(self) -> list[URLResolver | URLPattern]:
        own = [
            path(
                "tenants/<uuid:tenant_id>/dashboard/",
                self.admin_view(self.dashboard),
                name="tenant-dashboard",
            ),
            path(
                "tenants/<uuid:tenant_id>/tick/",
                self.admin_view(require_POST(self.run_tick)),
                name="tenant-tick",
            ),
        ]
        return own + super().get_urls()

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        rows = tenant_rows(visible_tenants(request).order_by("name"), timezone.now())
        sort = request.GET.get("sort", "name")
        key = sort.removeprefix("-")
        if key in dict(COLUMNS):
            rows.sort(key=lambda row: _sortable(row[key]), reverse=sort.startswith("-"))
        headings = [
            {"key": k, "label": label, "sort": f"-{k}" if sort == k else k, "active": key == k}
            for k, label in COLUMNS
        ]
        return super().index(request, {**(extra_context or {}), "tenant_rows": rows, "headings": headings})

    def dashboard(self, request: HttpRequest, tenant_id: Any) -> TemplateResponse:
        tenant = get_object_or_404(visible_tenants(request), pk=tenant_id)
        now = timezone.now()
        stats = tenant_stats([tenant], now)[tenant.pk]
        days = _days(request.GET.get("days"))
        snapshots = list(
            TenantSnapshot.objects.filter(tenant=tenant, taken_at__gte=now - timedelta(days=days)).order_by(
                "taken_at"
            )
        )
        points = [(s.taken_at, s.data) for s in snapshots] + [(now, stats)]
        context = {
            **self.each_context(request),
            "title": f"{tenant.name}: dashboard",
            "tenant": tenant,
            "stats": stats,
            "row": tenant_rows([tenant], now, {tenant.pk: stats})[0],
            "charts": [mark_safe(chart) for chart in dashboard_charts(points)],  # noqa: S308 - built from numbers and escaped names
            "days": days,
            "snapshots": len(snapshots),
            "policy": MemoryPolicy.objects.filter(tenant=tenant).first(),
            "runs": TickRun.objects.filter(tenant=tenant).order_by("-started_at", "-id")[:20],
        }
        return TemplateResponse(request, "admin/tenant_dashboard.html", context)

    def run_tick(self, request: HttpRequest, tenant_id: Any) -> HttpResponse:
        from django_q.tasks import async_task

        tenant = get_object_or_404(visible_tenants(request), pk=tenant_id)
        task = async_task(
            "lifecycle.tasks.tick_tenant", str(tenant.pk), task_name=f"tick {tenant.name} (console)"
        )
        messages.success(
            request, f"A tick of {tenant.name} is queued (task {task}); its run appears below when done."
        )
        return HttpResponseRedirect(reverse("admin:tenant-dashboard", args=[tenant.pk]))


def _sortable(value: Any) -> tuple[int, Any]:
    """None and "—" last whichever way, then numbers or text."""
    if value is None or value == "+Inf":
        return (1, 0)
    return (0, value.lower() if isinstance(value, str) else value)


def _days(raw: str | None) -> int:
    try:
        return min(90, max(1, int(raw or CHART_DAYS)))
    except ValueError:
        return CHART_DAYS


def tenant_rows(
    tenants: Sequence[Tenant] | Any, now: datetime, stats: Mapping[Any, Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The home's row for each tenant."""
    tenants = list(tenants)
    stats = stats if stats is not None else tenant_stats(tenants, now)
    rows = []
    for tenant in tenants:
        figures = stats[tenant.pk]
        last = figures["ticks"]["last"]
        day = figures["last_24h"]
        by_layer: dict[str, int] = {layer: sum(figures["episodes"][layer].values()) for layer in LAYERS}
        rows.append(
            {
                "tenant": tenant,
                "name": tenant.name,
                **by_layer,
                "searches_day": day["searches"] if day is not None else None,
                "p95": search_latency(figures, 0.95),
                "last_tick": last["started_at"] if last else None,
                "last_tick_status": last["status"] if last else "",
                "tick_errors": figures["ticks"]["last_24h"]["errors"],
                "pending": sum(figures["candidates_pending"].values()),
            }
        )
    return rows


def _episodes(data: Mapping[str, Any], layer: str) -> float:
    return float(sum(data.get("episodes", {}).get(layer, {}).values()))


def dashboard_charts(points: Sequence[tuple[datetime, Mapping[str, Any]]]) -> list[str]:
    """The dashboard's charts from the snapshots in time order (the live figures last)."""
    layers: dict[str, list[Point]] = {
        layer: [(at, _episodes(data, layer)) for at, data in points] for layer in LAYERS
    }
    compression: dict[str, list[Point]] = {
        layer: [
            (at, data["compression"][layer]) for at, data in points if data.get("compression", {}).get(layer)
        ]
        for layer in (Layer.WARM, Layer.COLD)
    }
    latency: dict[str, list[Point]] = {"p50": [], "p95": []}
    hit_share: dict[str, list[Point]] = {layer: [] for layer in LAYERS}
    unpacks: dict[str, list[Point]] = {"unpacks per hour": []}
    for (before_at, before), (at, data) in zip(points, points[1:], strict=False):
        then, now = before.get("counters"), data.get("counters")
        if not then or not now:
            continue
        buckets = gained(now["search_ms"]["buckets"], then["search_ms"]["buckets"])
        histogram = counters.Histogram(buckets, sum(buckets.values()), 0.0)
        for name, q in (("p50", 0.5), ("p95", 0.95)):
            value = histogram.quantile(q)
            if value is not None and value != float("inf"):
                latency[name].append((at, value))
        hits = gained(now["hits"], then["hits"])
        total = sum(hits.values())
        if total:
            for layer in LAYERS:
                hit_share[layer].append((at, hits.get(layer, 0) / total))
        hours = max((at - before_at).total_seconds() / 3600, 1 / 60)
        unpacks["unpacks per hour"].append(
            (at, sum(gained(now["unpacks"], then["unpacks"]).values()) / hours)
        )
    return [
        line_chart("Episodes by layer", layers),
        line_chart("Search latency (bucket bound)", latency, " ms"),
        line_chart("Share of search hits by layer", hit_share),
        line_chart("Unpack rate", unpacks),
        line_chart("Compression (raw / packed characters)", compression, "x"),
    ]
