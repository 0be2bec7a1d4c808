"""Deleting a tenant (rights.deletion): ``manage.py delete_tenant`` and the console's delete take its
memory from every store as an erasure does, then the tenant row; the audit keeps a record; another
tenant is untouched; an unknown name changes nothing; a running tick is waited for, and a deadlock
rolled back by Postgres is tried again."""

from __future__ import annotations

import io
import threading

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection

from episodes.models import Episode
from episodes.stores import keys
from lifecycle.models import JournalEntry
from lifecycle.tick import tick_lock
from memory_platform.redis_client import get_redis
from memory_platform.tenancy.models import AuditEvent, Tenant, TenantOperator
from rights import erasure
from rights.deletion import DeletionRefused, tenant_delete

from .factories import NOW
from .rights import rows

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "pw-12345678"


def redis_holdings(tenant_hex: str) -> dict[str, int]:
    client = get_redis()
    return {
        "keys": sum(1 for _ in client.scan_iter(match=keys.tenant_pattern(tenant_hex))),
        "indexes": sum(1 for n in client.execute_command("FT._LIST") if tenant_hex in str(n)),
    }


def left_in_postgres(tenant_id) -> dict[str, int]:
    """Rows of every table with a tenant column that still name the tenant (the audit's included)."""
    counts = {
        m._meta.label_lower: m._base_manager.filter(tenant_id=tenant_id).count()
        for m in erasure.tenant_tables()
    }
    return {label: n for label, n in counts.items() if n}


def deletion_records(name: str) -> list[AuditEvent]:
    return [
        e for e in AuditEvent._base_manager.filter(action="tenant_deleted") if e.detail.get("name") == name
    ]


def test_delete_tenant_takes_hot_warm_cold_and_the_journal_and_prints_the_receipt(source, outsider):
    tenant = source.tenant
    tenant_id, hex_ = tenant.pk, tenant.pk.hex
    layers = set(Episode.objects.across_tenants("test").filter(tenant=tenant).values_list("layer", flat=True))
    assert layers == {"hot", "warm", "cold"}
    assert JournalEntry.objects.across_tenants("test").filter(tenant=tenant).exists()
    assert redis_holdings(hex_)["keys"] > 0 and redis_holdings(hex_)["indexes"] > 0
    held = rows(tenant)
    queued = source.post(
        "/api/v1/turns", {"session_id": "late", "async": True, "turns": [{"role": "user", "text": "late"}]}
    )
    assert queued.status_code == 201
    outsider.post("/api/v1/memories", {"text": "the outsider keeps this"})
    other = rows(outsider.tenant)
    other_hot = redis_holdings(outsider.tenant.pk.hex)

    from memory_platform import counters

    counters.flush()
    assert get_redis().exists(f"mp:metrics:keys:{{{hex_}}}")  # its keys' uses, counted

    out = io.StringIO()
    call_command("delete_tenant", "source", "--yes", stdout=out)
    receipt = out.getvalue()

    assert f"deleted tenant source ({tenant_id})" in receipt
    assert f"{held['episodes'] + 1} episodes" in receipt  # the queued turn's episode was written
    assert f"{held['journal']} journal entries" in receipt
    assert "hot documents, 1 index(es)" in receipt
    assert "1 memory policy" in receipt and "API key" in receipt
    assert "check     clean" in receipt
    # nothing of it is left anywhere
    assert not Tenant.objects.filter(pk=tenant_id).exists()
    assert left_in_postgres(tenant_id) == {}
    assert redis_holdings(hex_) == {"keys": 0, "indexes": 0}
    assert not get_redis().exists(f"mp:metrics:{tenant_id}")
    # nor the counts of its keys' uses (its keys went with it)
    assert not get_redis().exists(f"mp:metrics:keys:{{{tenant_id.hex}}}")
    assert erasure._queued(tenant, None) == ([], [])
    # the audit: its records stay without their tenant, and the deletion is one of them
    (record,) = deletion_records("source")
    assert record.tenant_id is None and record.actor == "cli"
    assert record.detail["tenant_id"] == str(tenant_id)
    assert record.detail["removed"]["postgres"]["episodes.episode"] == held["episodes"] + 1
    assert record.detail["clean"] is True
    assert AuditEvent._base_manager.filter(tenant__isnull=True, action="erasure").exists()
    # the outsider is untouched
    assert rows(outsider.tenant) == other
    assert redis_holdings(outsider.tenant.pk.hex) == other_hot
    assert outsider.post("/api/v1/search", {"query": "outsider keeps"}).json()["results"]
    # the deleted tenant's key works no more
    assert source.get("/api/v1/whoami").status_code == 401


def test_an_unknown_tenant_is_an_error_and_changes_nothing(source):
    before = (Tenant.objects.count(), AuditEvent._base_manager.count(), rows(source.tenant))
    with pytest.raises(CommandError, match="no tenant named 'nobody'"):
        call_command("delete_tenant", "nobody", "--yes")
    assert (Tenant.objects.count(), AuditEvent._base_manager.count(), rows(source.tenant)) == before


def test_without_yes_and_without_a_terminal_it_refuses(source, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("source\n"))
    with pytest.raises(CommandError, match="--yes"):
        call_command("delete_tenant", "source")
    assert Tenant.objects.filter(pk=source.tenant.pk, is_active=True).exists()


def test_a_running_tick_is_waited_for_and_a_long_one_refuses(source):
    tenant = source.tenant
    held, release = threading.Event(), threading.Event()

    def tick_holder() -> None:
        with tick_lock(Tenant.objects.get(pk=tenant.pk), wait=0) as got:
            assert got
            held.set()
            release.wait(10)
        connection.close()

    thread = threading.Thread(target=tick_holder)
    thread.start()
    assert held.wait(10)
    before = rows(tenant)
    with pytest.raises(DeletionRefused, match="still running"):
        tenant_delete(tenant=tenant, now=NOW, actor="test", tick_wait=0.3)
    assert rows(tenant) == before
    assert Tenant.objects.get(pk=tenant.pk).is_active  # as it was

    threading.Timer(0.5, release.set).start()
    deletion = tenant_delete(tenant=tenant, now=NOW, actor="test", tick_wait=10)
    thread.join(10)
    assert deletion.clean and not Tenant.objects.filter(pk=tenant.pk).exists()


class Deadlock(Exception):
    sqlstate = "40P01"


def test_a_transaction_rolled_back_for_a_deadlock_is_tried_again():
    calls, waits, said = [], [], []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("deadlock detected") from Deadlock()
        return "done"

    assert erasure.in_transaction_retrying(flaky, sleep=waits.append, log=said.append) == "done"
    assert waits == [0.5, 1.0] and len(said) == 2

    def broken() -> None:
        raise OperationalError("connection lost")

    with pytest.raises(OperationalError):
        erasure.in_transaction_retrying(broken, sleep=waits.append)
    assert waits == [0.5, 1.0]  # not tried again


# --- the console -------------------------------------------------------------------------------------
def test_a_superuser_deletes_a_tenant_in_the_console_through_the_service(source, outsider, admin_client):
    tenant = source.tenant
    page = admin_client.get(f"/admin/tenancy/tenant/{tenant.pk}/delete/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "episodes" in text and "turns" in text and "permission" not in text
    other = rows(outsider.tenant)

    response = admin_client.post(f"/admin/tenancy/tenant/{tenant.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Tenant.objects.filter(pk=tenant.pk).exists()
    assert left_in_postgres(tenant.pk) == {}
    assert redis_holdings(tenant.pk.hex) == {"keys": 0, "indexes": 0}
    (record,) = deletion_records("source")
    assert record.actor == "admin:op"
    assert rows(outsider.tenant) == other

    # the list's action, through the same service
    response = admin_client.post(
        "/admin/tenancy/tenant/",
        {"action": "delete_selected", "_selected_action": [outsider.tenant.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert not Tenant.objects.filter(pk=outsider.tenant.pk).exists()
    assert deletion_records("outsider")


def test_a_staff_operator_cannot_delete_a_tenant(source, client):
    tenant = source.tenant
    user = get_user_model().objects.create_user("op-staff", password=PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="tenancy"))
    TenantOperator.objects.create(user=user, tenant=tenant)
    assert client.login(username="op-staff", password=PASSWORD)
    before = rows(tenant)

    assert client.get(f"/admin/tenancy/tenant/{tenant.pk}/delete/").status_code == 403
    assert client.post(f"/admin/tenancy/tenant/{tenant.pk}/delete/", {"post": "yes"}).status_code == 403
    client.post(
        "/admin/tenancy/tenant/",
        {"action": "delete_selected", "_selected_action": [tenant.pk], "post": "yes"},
    )
    assert Tenant.objects.filter(pk=tenant.pk, is_active=True).exists()
    assert rows(tenant) == before
    assert not deletion_records("source")
