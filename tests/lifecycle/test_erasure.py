"""Erasure for good (docs/decisions/0030): a tenant's memory, one person's, the tombstone, and the receipt's
verification against our own scan of every store."""

from __future__ import annotations

import json

import pytest

from episodes.models import Episode, ForgottenUser, Turn
from episodes.stores import keys
from episodes.stores.hot import hot_store
from lifecycle.models import JournalEntry, TickRun
from memory_platform.redis_client import get_redis
from memory_platform.tenancy.models import AuditEvent
from rights import erasure

from .rights import rows

pytestmark = pytest.mark.django_db(transaction=True)


def redis_holdings(tenant) -> dict[str, int]:
    client = get_redis()
    return {
        "keys": sum(1 for _ in client.scan_iter(match=keys.tenant_pattern(tenant.pk.hex))),
        "indexes": sum(1 for n in client.execute_command("FT._LIST") if tenant.pk.hex in str(n)),
    }


def queued_for(tenant) -> int:
    from django_q.models import OrmQ

    return sum(
        1
        for row in OrmQ.objects.all()
        if str(tenant.pk) in json.dumps(row.task.get("kwargs", {}), default=str)
    )


def test_tables_with_a_tenant_column_are_each_erased_or_kept():
    tables = {m._meta.label_lower for m in erasure.tenant_tables()}
    assert tables == {m._meta.label_lower for m in erasure.ERASED} | erasure.KEPT


def test_tenant_data_erasure_asks_first_then_leaves_nothing(source, outsider):
    tenant = source.tenant
    # something waiting in the task queue (no worker runs in the tests)
    queued = source.post(
        "/api/v1/turns",
        {"session_id": "late", "async": True, "turns": [{"role": "user", "text": "late words"}]},
    )
    assert queued.status_code == 201 and queued.json()["queued"]
    assert queued_for(tenant) >= 1
    other = rows(outsider.tenant)
    outsider.post("/api/v1/memories", {"text": "the outsider keeps this"})

    first = source.delete("/api/v1/tenant-data")
    assert first.status_code == 200, first.json()
    assert first.json()["will_erase"]["episodes.episode"] == 5
    assert Episode.objects.across_tenants("test").filter(tenant=tenant).count() == 5  # nothing changed yet
    assert source.delete("/api/v1/tenant-data", {"confirm": "forged"}).status_code == 409
    assert outsider.delete("/api/v1/tenant-data", {"confirm": first.json()["confirm"]}).status_code == 403

    second = source.delete("/api/v1/tenant-data", {"confirm": first.json()["confirm"]})
    assert second.status_code == 200, second.json()
    receipt = second.json()
    assert receipt["verification"]["clean"] is True
    assert receipt["removed"]["postgres"]["episodes.episode"] == 5
    assert receipt["removed"]["redis"]["documents"] > 0
    assert receipt["removed"]["queue"]["queued_tasks"] >= 1
    # our own scan, every table with a tenant column
    for model in erasure.tenant_tables():
        if model._meta.label_lower not in erasure.KEPT:
            assert not model._default_manager.filter(tenant=tenant).exists(), model
    assert redis_holdings(tenant) == {"keys": 0, "indexes": 0}
    assert queued_for(tenant) == 0
    assert not get_redis().exists(f"mp:metrics:{tenant.pk}")
    # the tenant, its policy and keys stay, and it works on
    assert source.get("/api/v1/policy").status_code == 200
    assert source.post("/api/v1/memories", {"text": "a fresh start"}).status_code == 201
    assert AuditEvent.objects.across_tenants("test").filter(tenant=tenant, action="erasure").count() == 1
    # the outsider is untouched
    assert rows(outsider.tenant)["episodes"] == other["episodes"] + 1
    assert outsider.post("/api/v1/search", {"query": "outsider keeps"}).json()["results"]


def test_forgetting_a_user_erases_them_only_and_keeps_them_out(source):
    tenant = source.tenant
    u1 = set(
        Episode.objects.across_tenants("test")
        .filter(tenant=tenant, user_id="u1")
        .values_list("pk", flat=True)
    )
    u2 = list(
        Episode.objects.across_tenants("test")
        .filter(tenant=tenant, user_id="u2")
        .order_by("pk")
        .values("pk", "version", "layer")
    )
    assert u1 and u2
    first = source.post("/api/v1/forget", {"user_id": "u1", "erase": True})
    assert first.status_code == 200, first.json()
    assert first.json()["will_erase"]["episodes"] == len(u1)
    assert Episode.objects.across_tenants("test").filter(pk__in=u1).count() == len(u1)

    second = source.post(
        "/api/v1/forget", {"user_id": "u1", "erase": True, "confirm": first.json()["confirm"]}
    )
    assert second.status_code == 200, second.json()
    assert second.json()["verification"]["clean"] is True
    assert not Episode.objects.across_tenants("test").filter(pk__in=u1).exists()
    assert not Turn.objects.across_tenants("test").filter(tenant=tenant, user_id="u1").exists()
    assert not JournalEntry.objects.across_tenants("test").filter(episode_id_value__in=u1).exists()
    store = hot_store()
    assert not (store.episode_ids(tenant.pk.hex) & u1)
    assert (
        list(
            Episode.objects.across_tenants("test")
            .filter(tenant=tenant, user_id="u2")
            .order_by("pk")
            .values("pk", "version", "layer")
        )
        == u2
    )
    # a retried write cannot bring u1 back; u2 writes on
    again = source.post(
        "/api/v1/turns", {"user_id": "u1", "session_id": "s9", "turns": [{"role": "user", "text": "hi"}]}
    )
    assert again.status_code == 410, again.json()
    assert source.post("/api/v1/memories", {"text": "x", "user_id": "u1"}).status_code == 410
    assert source.post("/api/v1/memories", {"text": "y", "user_id": "u2"}).status_code == 201
    assert ForgottenUser.objects.across_tenants("test").filter(tenant=tenant).count() == 1
    assert "u1" not in json.dumps(list(ForgottenUser.objects.across_tenants("test").values()), default=str)


def test_an_operator_lifts_a_tombstone_and_it_is_audited(source, admin_client):
    confirm = source.post("/api/v1/forget", {"user_id": "u1", "erase": True}).json()["confirm"]
    assert (
        source.post("/api/v1/forget", {"user_id": "u1", "erase": True, "confirm": confirm}).status_code == 200
    )
    tombstone = ForgottenUser.objects.across_tenants("test").get(tenant=source.tenant)
    response = admin_client.post(
        "/admin/episodes/forgottenuser/",
        {"action": "delete_selected", "_selected_action": [tombstone.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert not ForgottenUser.objects.across_tenants("test").filter(tenant=source.tenant).exists()
    event = AuditEvent.objects.across_tenants("test").get(tenant=source.tenant, action="forget_user_lifted")
    assert event.actor.startswith("admin:") and event.detail == {"user_hash": tombstone.user_hash}
    assert source.post("/api/v1/memories", {"text": "back again", "user_id": "u1"}).status_code == 201


def test_forget_user_erase_needs_admin_and_only_a_user(source, caller):
    assert caller.post("/api/v1/forget", {"user_id": "u1", "erase": True}).status_code == 403
    response = source.post("/api/v1/forget", {"user_id": "u1", "kind": "fact", "erase": True})
    assert response.status_code == 400
    assert source.post("/api/v1/forget", {"erase": True}).status_code == 400


def test_erasure_is_refused_whole_when_redis_is_down(source, monkeypatch):
    from redis.exceptions import ConnectionError as RedisConnectionError

    first = source.delete("/api/v1/tenant-data").json()["confirm"]
    before = rows(source.tenant)

    def down(*args, **kwargs):
        raise RedisConnectionError("Connection refused")

    monkeypatch.setattr(type(hot_store()), "drop_tenant", down)
    response = source.delete("/api/v1/tenant-data", {"confirm": first})
    assert response.status_code == 503, response.json()
    assert rows(source.tenant) == before
    assert TickRun.objects.across_tenants("test").filter(tenant=source.tenant).exists()
