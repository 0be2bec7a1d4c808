"""The home's figures from the first minute: latency percentiles estimated within their bucket
(not the bucket's bound), searches counted since counting began until a day of snapshots exists,
and a snapshot when the platform starts for each tenant without a recent one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from console.health import tenant_rows
from console.site import policy_limits
from lifecycle.models import TenantSnapshot
from lifecycle.stats import latency_quantile
from lifecycle.tasks import schedule_ticks
from memory_platform.tenancy.services import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)


def test_one_search_is_its_own_percentile_and_more_are_interpolated():
    assert latency_quantile({"2500": 1}, 1, 1234.5, 0.95) == 1234.5  # not "2500"
    assert latency_quantile({}, 0, 0.0, 0.95) is None
    # 10 searches in (10, 25] and 10 in (25, 50]: the median is the first bucket's top, p95 inside the second
    assert latency_quantile({"25": 10, "50": 10}, 20, 600.0, 0.5) == 25.0
    assert latency_quantile({"25": 10, "50": 10}, 20, 600.0, 0.95) == 47.5
    assert latency_quantile({"+Inf": 3}, 3, 90_000.0, 0.5) == float("inf")


def test_a_new_tenant_counts_since_start_and_gets_a_snapshot_when_the_platform_starts():
    tenant = tenant_create(name="fresh", embedder="provided")
    outsider = tenant_create(name="outsider", embedder="provided")
    TenantSnapshot.objects.create(tenant=outsider, taken_at=timezone.now() - timedelta(minutes=5), data={})
    row = tenant_rows([tenant], timezone.now(), policy_limits([tenant]))[0]
    assert row["searches"] == 0 and row["searches_over_day"] is False and row["problems"] == []

    schedule_ticks()  # what `make run` does on start, and every 10 minutes after
    assert TenantSnapshot.objects.filter(tenant=tenant).count() == 1
    assert TenantSnapshot.objects.filter(tenant=outsider).count() == 1  # it had a recent one
    schedule_ticks()
    assert TenantSnapshot.objects.filter(tenant=tenant).count() == 1  # not again within the hour
