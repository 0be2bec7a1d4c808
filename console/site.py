"""The operator console: Django's admin on the unfold theme, titled "Memory platform"
(docs/decisions/0051-console-on-unfold.md), whose home is one row per tenant with its health
(``console.health``) and whose tenant dashboard charts the snapshots
(docs/decisions/0028-console-figures-and-preview.md); the review queue (``console.review``) and the
search playground (``console.playground``) are its pages too.

Every figure comes from ``lifecycle.stats`` (the same numbers as ``GET /api/v1/stats`` and
``GET /metrics``); charts are inline SVG (``console.charts``). "Run a tick now" queues the tick
on the task worker, never on the request thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.db.models.base import ModelBase
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, URLResolver, path, reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST
from unfold.admin import ModelAdmin
from unfold.sites import UnfoldAdminSite

from episodes.models import Layer
from lifecycle.models import MemoryPolicy, TenantSnapshot, TickRun
from lifecycle.stats import LAYERS, gained, latency_quantile, tenant_stats
from memory_platform.admin_base import SuperusersOnly, visible_tenants
from memory_platform.tenancy.models import Tenant

from . import playground, review
from .charts import Point, line_chart
from .health import tenant_rows

#: The home's columns: (key, heading, what it says); sortable by ``?sort=<key>`` (``-<key>``
#: descending).
COLUMNS = (
    ("name", "Tenant", ""),
    ("hot", "Episodes", "hot / warm / cold"),
    ("hot_bytes", "Hot bytes", "against the policy's hot quota"),
    ("searches", "Searches", "over 24 hours, or since counting began while the tenant is younger"),
    (
        "p95",
        "p95 (ms)",
        "search latency, 95th percentile, over the same period (in brackets: the searches it rests on)",
    ),
    ("last_tick", "Last tick", "how long ago, and its status"),
    ("tick_errors", "Tick errors", "failed ticks and errors over 24 hours"),
    ("backlog", "Index backlog", "hot episodes waiting for the hot index"),
    ("pending", "To review", "merge and delete proposals"),
)
CHART_DAYS = 14
#: Apps whose pages only a superuser sees (``SuperusersOnly``): django-q's tasks, schedules and
#: failures hold every tenant's task arguments and results, and no tenant column to scope them by.
SUPERUSER_APPS = frozenset({"django_q"})


class ConsoleSite(UnfoldAdminSite):
    site_header = "Memory platform"
    site_title = "Memory platform"
    index_title = "Tenants"
    index_template = "admin/console_index.html"
    # The console's own pages write a missing value as "—"; Django's admin writes "-".
    empty_value_display = "—"

    def register(self, model_or_iterable: Any, admin_class: Any = None, **options: Any) -> None:
        models: list[Any] = (
            [model_or_iterable] if isinstance(model_or_iterable, ModelBase) else list(model_or_iterable)
        )
        for model in models:
            own = admin_class or ModelAdmin
            if model._meta.app_label in SUPERUSER_APPS and not issubclass(own, SuperusersOnly):
                # The task queue's own pages: a superuser's alone, drawn by the theme.
                own = type(own.__name__, (SuperusersOnly, own, ModelAdmin), {})
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
            path("review/", self.admin_view(self.review_queue), name="review-queue"),
            path(
                "review/<int:candidate_id>/<str:decision>/",
                self.admin_view(require_POST(review.decide)),
                name="review-decide",
            ),
            path("playground/", self.admin_view(self.playground), name="playground"),
        ]
        return own + super().get_urls()

    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # The theme's login form carries no "next": without one, a login would land on
        # LOGIN_REDIRECT_URL (a page that does not exist) instead of the console's home.
        if REDIRECT_FIELD_NAME not in request.POST and REDIRECT_FIELD_NAME not in request.GET:
            request.GET = query = request.GET.copy()  # type: ignore[assignment]
            query[REDIRECT_FIELD_NAME] = reverse("admin:index", current_app=self.name)
        return super().login(request, extra_context)

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        tenants = list(visible_tenants(request).order_by("name"))
        rows = tenant_rows(tenants, timezone.now(), policy_limits(tenants))
        sort = request.GET.get("sort", "name")
        key = sort.removeprefix("-")
        if key in {k for k, _, _ in COLUMNS}:
            rows.sort(key=lambda row: _sortable(row[key]), reverse=sort.startswith("-"))
        headings = [
            {"key": k, "label": label, "hint": hint, "sort": f"-{k}" if sort == k else k, "active": key == k}
            for k, label, hint in COLUMNS
        ]
        return super().index(
            request,
            {
                **(extra_context or {}),
                "tenant_rows": rows,
                "headings": headings,
                "title": "Tenants",
                "subtitle": None,
            },
        )

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
        if tenant.created_at >= now - timedelta(days=days) and (
            not snapshots or snapshots[0].taken_at > tenant.created_at
        ):
            # At its creation a tenant holds nothing and has counted nothing: the charts start
            # there, not at its first hourly snapshot.
            points.insert(0, (tenant.created_at, CREATED))
        context = {
            **self.each_context(request),
            "title": f"{tenant.name}: dashboard",
            "tenant": tenant,
            "stats": stats,
            "row": tenant_rows([tenant], now, policy_limits([tenant]), {tenant.pk: stats})[0],
            "charts": [mark_safe(chart) for chart in dashboard_charts(points)],  # noqa: S308 - built from numbers and escaped names
            "days": days,
            "snapshots": len(snapshots),
            "policy": MemoryPolicy.objects.filter(tenant=tenant).first(),
            "runs": TickRun.objects.filter(tenant=tenant).order_by("-started_at", "-id")[:20],
        }
        return TemplateResponse(request, "admin/tenant_dashboard.html", context)

    def review_queue(self, request: HttpRequest) -> TemplateResponse:
        return review.queue(self, request)

    def playground(self, request: HttpRequest) -> TemplateResponse:
        return playground.playground(self, request)

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


def policy_limits(tenants: Sequence[Tenant]) -> dict[Any, dict[str, Any]]:
    """Each tenant's hot quota and tick interval, from its policy row (one statement)."""
    rows = MemoryPolicy.objects.filter(tenant_id__in=[t.pk for t in tenants]).values(
        "tenant_id", "hot_quota_bytes", "tick_interval_minutes"
    )
    return {row["tenant_id"]: row for row in rows}


#: A tenant's figures at its creation, as the charts read them.
CREATED: dict[str, Any] = {
    "episodes": {},
    "counters": {"search_ms": {"buckets": {}, "count": 0, "sum": 0.0}, "hits": {}, "unpacks": {}},
}


def _sortable(value: Any) -> tuple[int, Any]:
    """None and "—" last whichever way, then numbers, times or text."""
    if value is None or value == "+Inf":
        return (1, 0)
    if isinstance(value, datetime):
        return (0, value.timestamp())
    return (0, value.lower() if isinstance(value, str) else value)


def _days(raw: str | None) -> int:
    try:
        return min(90, max(1, int(raw or CHART_DAYS)))
    except ValueError:
        return CHART_DAYS


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
        count = sum(buckets.values())
        spent = max(0.0, now["search_ms"].get("sum", 0.0) - then["search_ms"].get("sum", 0.0))
        for name, q in (("p50", 0.5), ("p95", 0.95)):
            value = latency_quantile(buckets, count, spent, q)
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
        line_chart("Search latency", latency, " ms"),
        line_chart("Share of search hits by layer", hit_share),
        line_chart("Unpack rate", unpacks),
        line_chart("Compression (raw / packed characters)", compression, "x"),
    ]
