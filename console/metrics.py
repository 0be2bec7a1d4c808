"""``GET /metrics``: the platform's figures in Prometheus's text format.

The same figures as the console and ``GET /api/v1/stats`` (``lifecycle.stats``), for every tenant,
plus what belongs to no tenant: HTTP request latency per route and failed background tasks. Not
public: a request from this machine that no proxy forwarded, or one bearing ``METRICS_TOKEN`` as a
Bearer token (``memory_platform.api.health.may_see_details``); anyone else gets 404.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from uuid import UUID

from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from lifecycle.stats import LAYERS, tenant_stats
from memory_platform import counters
from memory_platform.api.health import may_see_details
from memory_platform.tenancy.models import Tenant


def _histogram(
    name: str,
    documentation: str,
    labels: list[str],
    series: Mapping[tuple[tuple[str, str], ...], counters.Histogram],
) -> HistogramMetricFamily:
    """Counted milliseconds as a Prometheus histogram in seconds (cumulative buckets)."""
    family = HistogramMetricFamily(name, documentation, labels=labels)
    for label_set, histogram in sorted(series.items()):
        values = dict(label_set)
        cumulative, buckets = 0.0, []
        for bound in [*(f"{b:g}" for b in counters.LATENCY_BUCKETS_MS), "+Inf"]:
            cumulative += histogram.buckets.get(bound, 0.0)
            buckets.append((bound if bound == "+Inf" else f"{float(bound) / 1000:g}", cumulative))
        family.add_metric([values.get(label, "") for label in labels], buckets, histogram.sum / 1000)
    return family


class _Collector:
    def __init__(self, tenants: list[Tenant], stats: dict[UUID, dict[str, Any]], live: dict[str, Any]):
        self.tenants, self.stats, self.live = tenants, stats, live

    def collect(self) -> Iterator[Metric]:
        episodes = GaugeMetricFamily(
            "memory_episodes", "Episodes by layer and state", labels=["tenant", "layer", "state"]
        )
        turns = GaugeMetricFamily("memory_turns", "Turns by layer", labels=["tenant", "layer"])
        size = GaugeMetricFamily(
            "memory_layer_bytes",
            "Bytes held per layer (hot: text and vectors; warm, cold: packed shapes)",
            labels=["tenant", "layer"],
        )
        ratio = GaugeMetricFamily(
            "memory_compression_ratio", "Raw characters per packed character", labels=["tenant", "layer"]
        )
        pending = GaugeMetricFamily(
            "memory_candidates_pending",
            "Merge and delete proposals awaiting review",
            labels=["tenant", "kind"],
        )
        searches = CounterMetricFamily("memory_searches", "Searches by path", labels=["tenant", "path"])
        hits = CounterMetricFamily("memory_search_hits", "Search hits by layer", labels=["tenant", "layer"])
        unpacks = CounterMetricFamily(
            "memory_unpacks", "Packed episodes brought back to hot", labels=["tenant", "layer"]
        )
        feedback = CounterMetricFamily(
            "memory_feedback", "Feedback on returned memories", labels=["tenant", "kind"]
        )
        ingested = CounterMetricFamily("memory_turns_ingested", "Turns received", labels=["tenant"])
        ticks = CounterMetricFamily("memory_ticks", "Lifecycle ticks by outcome", labels=["tenant", "status"])
        tick_errors = CounterMetricFamily("memory_tick_errors", "Errors recorded by ticks", labels=["tenant"])
        search_latency: dict[tuple[tuple[str, str], ...], counters.Histogram] = {}
        tick_latency: dict[tuple[tuple[str, str], ...], counters.Histogram] = {}
        for tenant in self.tenants:
            name, stats, metrics = tenant.name, self.stats[tenant.pk], self.live[str(tenant.pk)]
            for layer in LAYERS:
                for state, n in sorted(stats["episodes"][layer].items()):
                    episodes.add_metric([name, layer, state], n)
                turns.add_metric([name, layer], stats["turns"][layer])
                size.add_metric([name, layer], stats["bytes"][layer])
                if layer in stats["compression"] and stats["compression"][layer] is not None:
                    ratio.add_metric([name, layer], stats["compression"][layer])
            for kind, n in sorted(stats["candidates_pending"].items()):
                pending.add_metric([name, kind], n)
            counted = stats["counters"]
            for family, values in (
                (searches, counted["searches"]),
                (hits, counted["hits"]),
                (unpacks, counted["unpacks"]),
                (feedback, counted["feedback"]),
            ):
                for label, n in sorted(values.items()):
                    family.add_metric([name, label], n)
            ingested.add_metric([name], counted["turns_ingested"])
            for label_set, n in sorted(metrics.get("ticks", counters.Series()).values.items()):
                ticks.add_metric([name, dict(label_set).get("status", "")], n)
            tick_errors.add_metric([name], counters.total(metrics, "tick_errors"))
            for label_set, histogram in counters.histograms(metrics, "search_ms").items():
                search_latency[(("tenant", name), *label_set)] = histogram
            for label_set, histogram in counters.histograms(metrics, "tick_ms").items():
                tick_latency[(("tenant", name), *label_set)] = histogram
        yield from (
            episodes,
            turns,
            size,
            ratio,
            pending,
            searches,
            hits,
            unpacks,
            feedback,
            ingested,
            ticks,
            tick_errors,
        )
        yield _histogram(
            "memory_search_duration_seconds", "Search latency by path", ["tenant", "path"], search_latency
        )
        yield _histogram("memory_tick_duration_seconds", "Tick duration", ["tenant"], tick_latency)
        platform = self.live[counters.PLATFORM]
        yield _histogram(
            "memory_http_request_duration_seconds",
            "HTTP request latency by route, method and status class",
            ["route", "method", "status"],
            counters.histograms(platform, "request_ms"),
        )
        yield _task_failures()


def _task_failures() -> GaugeMetricFamily:
    from django_q.models import Failure

    family = GaugeMetricFamily(
        "memory_task_failures", "Failed background tasks kept by the queue", labels=["func"]
    )
    for row in Failure.objects.values("func").annotate(n=Count("id")).order_by("func"):
        family.add_metric([row["func"]], row["n"])
    return family


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not may_see_details(request):
        raise Http404  # not there for anyone else: nothing to probe
    tenants = list(Tenant.objects.order_by("name"))
    live = counters.read([*(t.pk for t in tenants), counters.PLATFORM])
    stats = tenant_stats(tenants, timezone.now(), live)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(tenants, stats, live))  # type: ignore[arg-type]
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
