"""`bench search --compare-redis URL`: the service's search on the default hot tier and on a
second Redis deployment (a cluster, most often) in one process, query by query.

Two runs an hour apart, or even back to back, differ by more on these shared machines than a
cluster's cost (the Postgres floor, which no Redis touches, moved 1.3-1.5x between such runs):
here each query is searched on both deployments one after the other, in alternating order, so
both sets of timings share every moment's load. The tenant's hot episodes are indexed on the
second deployment from Postgres first, and dropped from it at the end; the warm and cold tiers are
the same rows for both (docs/decisions/0052-hot-tier-on-redis-cluster.md).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from django.test import override_settings
from django.utils import timezone

from episodes.indexing import rebuild_hot
from episodes.stores import hot
from episodes.stores.hot import HotStore
from memory_platform.redis_client import is_cluster_url
from memory_platform.tenancy.models import Tenant
from retrieval.query import SearchQuery
from retrieval.services import record_access, search


def store_for(url: str) -> HotStore:
    """A hot store on ``url``, its clients built as the platform builds them for ``REDIS_URL``."""
    with override_settings(REDIS_URL=url):
        return HotStore()


@contextlib.contextmanager
def searching_on(store: HotStore) -> Iterator[None]:
    """Every ``hot_store()`` of this process is ``store`` for the block."""
    previous = hot._store
    hot._store = store
    try:
        yield
    finally:
        hot._store = previous


def kind(url: str) -> str:
    return "Redis Cluster" if is_cluster_url(url) else "one Redis"


def compare(
    tenant: Tenant,
    queries: list[tuple[str, list[float]]],
    url: str,
    log: Callable[[str], None],
) -> dict[str, dict[bool, list[float]]]:
    """Per deployment (``default`` and ``url``), the service's times with and without the caller's
    vector, each query timed on both in turn."""
    default, other = hot.hot_store(), store_for(url)
    log(f"  indexing the tenant's hot episodes on the {kind(url)} too")
    with searching_on(other):
        rebuild_hot(tenant=tenant)
    stores = {"default": default, "other": other}
    times: dict[str, dict[bool, list[float]]] = {name: {True: [], False: []} for name in stores}
    try:
        for with_vector in (True, False):
            for i, (text, vector) in enumerate(queries):
                order = ("default", "other") if i % 2 == 0 else ("other", "default")
                for name in order:
                    with searching_on(stores[name]):
                        times[name][with_vector].append(_timed_search(tenant, text, vector, with_vector))
    finally:
        other.drop_tenant(tenant.id.hex)
    return times


def _timed_search(tenant: Tenant, text: str, vector: list[float], with_vector: bool) -> float:
    query = SearchQuery(
        text=text,
        vector=np.asarray(vector, dtype=np.float32) if with_vector else None,
        limit=10,
        record_access=False,
    )
    now = timezone.now()
    started = time.perf_counter()
    result = search(tenant=tenant, query=query, now=now)
    took = (time.perf_counter() - started) * 1000
    record_access(tenant=tenant, episode_ids=[h.episode.pk for h in result.hits], now=now)
    return took


def rows(
    size: int, url: str, times: dict[str, dict[bool, list[float]]], percentiles: Callable[[list[float]], Any]
) -> list[dict[str, Any]]:
    """One row per deployment and path, and the second deployment's p95 over the default's."""
    out = []
    for with_vector, path in ((True, "service, caller vector"), (False, "service, local embedding")):
        base = percentiles(times["default"][with_vector])
        other = percentiles(times["other"][with_vector])
        out.append(
            {
                "episodes": size,
                "path": f"{path} [default Redis]",
                "queries": len(times["default"][with_vector]),
                **base,
            }
        )
        out.append(
            {
                "episodes": size,
                "path": f"{path} [{kind(url)}]",
                "queries": len(times["other"][with_vector]),
                **other,
                "p95_over_default": round(other["p95"] / base["p95"], 2) if base["p95"] else None,
            }
        )
    return out
