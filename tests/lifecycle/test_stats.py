"""A tenant's figures: one computation read by ``GET /api/v1/stats``,
``GET /metrics`` and the console; hourly snapshots; statements that do not grow with tenants."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from lifecycle.models import TenantSnapshot
from lifecycle.services import episode_pack
from lifecycle.stats import search_latency, take_snapshots, tenant_stats
from memory_platform.tenancy.services import tenant_create
from tests.conftest import Caller, pk

from .factories import NOW, conversation

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator(caller) -> Caller:
    """An admin key of the caller's tenant."""
    return Caller("acme", scopes=("admin",), tenant=caller.tenant)


def _use(caller: Caller) -> str:
    """Turns in, three searches, a packed memory unpacked, feedback: every counted kind once."""
    caller.post(
        "/api/v1/turns",
        {
            "session_id": "s1",
            "turns": [
                {"role": "user", "text": "the vault code is 4471"},
                {"role": "assistant", "text": "noted"},
            ],
        },
    )
    memory = caller.post("/api/v1/memories", {"text": "Priya prefers window seats", "kind": "fact"}).json()[
        "id"
    ]
    episode_pack(tenant=caller.tenant, episode_id=pk(memory), layer="warm", now=timezone.now(), actor="test")
    for query in ("vault code", "window seats", "nothing like this"):
        assert caller.post("/api/v1/search", {"query": query}).status_code == 200
    assert caller.post(f"/api/v1/memories/{memory}/unpack").status_code == 200
    assert caller.post("/api/v1/feedback", {"used": [memory]}).status_code == 200
    return memory


def test_stats_count_what_the_tenant_did_and_nothing_of_others(caller, operator, outsider):
    _use(caller)
    body = operator.get("/api/v1/stats").json()
    assert body["tenant"] == "acme"
    assert body["episodes_total"] == 2 and body["turns"]["hot"] == 3
    assert sum(body["episodes"]["hot"].values()) == 2  # the warm one is hot again
    counted = body["counters"]
    assert sum(counted["searches"].values()) == 3
    assert counted["search_ms"]["count"] == 3 and counted["hits"].get("warm", 0) >= 1
    assert counted["unpacks"] == {"warm": 1}
    assert counted["feedback"] == {"used": 1}  # nothing counted, nothing listed
    assert counted["turns_ingested"] == 2 and counted["memories_created"] == 1
    assert search_latency(body, 0.95) is not None
    assert body["last_24h"] is None  # no snapshot a day old yet

    # the outsider's admin key sees its own empty tenant, nothing of acme's
    outsider_admin = Caller("outsider", scopes=("admin",), tenant=outsider.tenant)
    theirs = outsider_admin.get("/api/v1/stats").json()
    assert theirs["tenant"] == "outsider" and theirs["episodes_total"] == 0
    assert theirs["counters"]["searches"] == {} and theirs["counters"]["turns_ingested"] == 0


def test_stats_need_the_admin_scope(caller):
    response = caller.get("/api/v1/stats")
    assert response.status_code == 403, response.content


def test_last_24_hours_subtract_the_snapshot_of_a_day_before(caller):
    caller.post("/api/v1/search", {"query": "before the snapshot"})
    now = timezone.now()
    assert take_snapshots(now - timedelta(hours=25)) == {"taken": 1, "removed": 0}
    for _ in range(4):
        caller.post("/api/v1/search", {"query": "after the snapshot"})
    day = tenant_stats([caller.tenant], now)[caller.tenant.pk]["last_24h"]
    assert day["searches"] == 4 and day["search_ms_p95"] is not None

    # snapshots older than the kept days go when the next ones are taken
    old = TenantSnapshot.objects.create(tenant=caller.tenant, taken_at=now - timedelta(days=91), data={})
    assert take_snapshots(now)["removed"] == 1
    assert not TenantSnapshot.objects.across_tenants("test").filter(pk=old.pk).exists()


def test_statements_do_not_grow_with_tenants_or_episodes(provided):
    def statements(tenants) -> int:
        with CaptureQueriesContext(connection) as queries:
            stats = tenant_stats(tenants, NOW)
        assert set(stats) == {t.pk for t in tenants}
        return len(queries)

    conversation(provided.tenant, session="s1", idle_days=1)
    one = statements([provided.tenant])
    many = [tenant_create(name=f"t{n}", embedder="provided") for n in range(19)]
    for n, tenant in enumerate(many[:5]):
        conversation(tenant, session="s1", idle_days=1 + n, seed=n)
    assert statements([provided.tenant, *many]) == one


def test_metrics_in_prometheus_format_for_this_machine_or_the_token(caller, client, settings):
    _use(caller)
    text = client.get("/metrics").content.decode()
    assert 'memory_episodes{layer="hot",state="active",tenant="acme"} 2.0' in text
    assert "memory_searches_total{path=" in text and 'memory_turns_ingested_total{tenant="acme"} 2.0' in text
    assert "memory_search_duration_seconds_count{path=" in text
    assert 'memory_unpacks_total{layer="warm",tenant="acme"} 1.0' in text
    assert (
        'memory_http_request_duration_seconds_bucket{le="+Inf",method="POST",route="v1:search",status="2xx"} 3.0'
        in text
    )

    # not from another machine, unless it brings the token
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 404
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 404
    settings.METRICS_TOKEN = "scrape-secret"
    answer = client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/plain")
