"""The audit: keys created, rotated and revoked by a service, the command line and the
console are recorded with who and when; every authenticated request is counted per key; operators
read their tenants' events and nobody else's; no secret reaches a log."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory_platform import counters
from memory_platform.tenancy.audit import (
    ACTIONS,
    ERASURE,
    KEY_CREATED,
    KEY_REVOKED,
    KEY_ROTATED,
    audit_record,
    key_uses,
)
from memory_platform.tenancy.models import ApiKey, AuditEvent, TenantOperator
from memory_platform.tenancy.services import api_key_create, api_key_revoke, api_key_rotate
from tests.conftest import Caller

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PASSWORD = "pw-12345678"


def events(tenant) -> list[tuple[str, str]]:
    """The tenant's (action, actor), oldest first."""
    return [
        (e.action, e.actor)
        for e in AuditEvent.objects.across_tenants("test").filter(tenant=tenant).order_by("at", "id")
    ]


def secrets_in(body: str) -> list[str]:
    return re.findall(r'<code class="secret">([^<]+)</code>', body)


def whoami(secret: str, client) -> int:
    return client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code


# --- who and when ---------------------------------------------------------------------------------
def add_key_in_console(admin_client, tenant):
    """A read key called "ci" made on the console's add page; the page that shows its secret."""
    fields = {"name": "ci", "tenant": tenant.pk, "scopes": "read", "expiry_date_0": "", "expiry_date_1": ""}
    return admin_client.post("/admin/tenancy/apikey/add/", fields, follow=True)


def test_the_services_record_create_rotate_and_revoke_with_who_and_when(caller, outsider):
    created = AuditEvent.objects.across_tenants("test").get(tenant=caller.tenant)
    assert (created.action, created.actor) == (KEY_CREATED, "service")
    assert created.detail == {"prefix": caller.key.prefix, "name": "acme key", "scopes": ["read", "write"]}

    now = created.at + timedelta(minutes=5)
    new, _ = api_key_rotate(key=caller.key, actor="api:abc", now=now, grace=timedelta(minutes=30))
    rotated = AuditEvent.objects.across_tenants("test").filter(tenant=caller.tenant).first()  # newest first
    assert (rotated.action, rotated.actor, rotated.at) == (KEY_ROTATED, "api:abc", now)
    assert rotated.detail["prefix"] == caller.key.prefix and rotated.detail["new_prefix"] == new.prefix
    assert rotated.detail["grace_minutes"] == 30
    ends = datetime.fromisoformat(rotated.detail["old_key_ends"])
    assert abs(ends - (now + timedelta(minutes=30))) < timedelta(milliseconds=1)

    later = now + timedelta(hours=1)
    assert api_key_revoke(key=new, actor="cli", now=later) is True
    assert api_key_revoke(key=new, actor="cli", now=later) is False  # once: nothing more recorded
    revoked = AuditEvent.objects.across_tenants("test").filter(tenant=caller.tenant).first()
    assert (revoked.action, revoked.actor, revoked.at, revoked.detail["prefix"]) == (
        KEY_REVOKED,
        "cli",
        later,
        new.prefix,
    )
    assert [a for a, _ in events(caller.tenant)] == [KEY_CREATED, KEY_ROTATED, KEY_REVOKED]
    assert events(outsider.tenant) == [(KEY_CREATED, "service")]  # the outsider's own key only
    assert caller.secret not in str(
        list(AuditEvent.objects.across_tenants("test").values_list("detail", flat=True))
    )


def test_an_unknown_action_is_refused(caller):
    assert {KEY_CREATED, KEY_ROTATED, KEY_REVOKED, "export", "import", ERASURE, "forget_user"} <= ACTIONS
    with pytest.raises(ValueError, match="unknown audit action"):
        audit_record(tenant=caller.tenant, action="key_stolen", actor="cli", now=NOW)
    event = audit_record(
        tenant=caller.tenant, action=ERASURE, actor="admin:op", now=NOW, removed={"turns": 3}
    )
    assert AuditEvent.objects.across_tenants("test").get(pk=event.pk).detail == {"removed": {"turns": 3}}


def test_the_command_records_its_changes_as_cli(caller):
    out, err = StringIO(), StringIO()
    call_command("api_key", "create", "acme", "--name", "ci", stdout=out, stderr=err)
    made = ApiKey.objects.across_tenants("test").get(tenant=caller.tenant, name="ci")
    call_command("api_key", "rotate", made.prefix, stdout=out, stderr=err)
    rotated = ApiKey.objects.across_tenants("test").get(tenant=caller.tenant, name="ci", revoked=False)
    call_command("api_key", "revoke", rotated.prefix, stdout=out, stderr=err)
    again = StringIO()
    call_command("api_key", "revoke", rotated.prefix, stdout=again)
    assert "revoked already" in again.getvalue()

    assert events(caller.tenant) == [
        (KEY_CREATED, "service"),  # the fixture's key
        (KEY_CREATED, "cli"),
        (KEY_ROTATED, "cli"),
        (KEY_REVOKED, "cli"),
    ]
    details = [
        e.detail
        for e in AuditEvent.objects.across_tenants("test").filter(tenant=caller.tenant).order_by("at", "id")
    ]
    assert details[1]["prefix"] == made.prefix
    assert (details[2]["prefix"], details[2]["new_prefix"]) == (made.prefix, rotated.prefix)
    assert details[3]["prefix"] == rotated.prefix


def test_the_console_records_its_changes_with_the_user(admin_client, caller):
    before = timezone.now()
    added = add_key_in_console(admin_client, caller.tenant)
    assert len(secrets_in(added.content.decode())) == 1
    made = ApiKey.objects.across_tenants("test").get(tenant=caller.tenant, name="ci")
    chosen = {"action": "rotate_keys", "_selected_action": [made.pk], "grace": "60"}
    assert admin_client.post("/admin/tenancy/apikey/", chosen).status_code == 200
    new = ApiKey.objects.across_tenants("test").get(
        tenant=caller.tenant, name="ci", revoked=False, expiry_date=None
    )
    revoke = {"action": "revoke_keys", "_selected_action": [new.pk, caller.key.pk]}
    assert admin_client.post("/admin/tenancy/apikey/", revoke).status_code == 302
    admin_client.post("/admin/tenancy/apikey/", revoke)  # revoked already: nothing new

    mine = (
        AuditEvent.objects.across_tenants("test")
        .filter(tenant=caller.tenant, actor="admin:op")
        .order_by("at", "id")
    )
    assert [(e.action, e.detail["prefix"]) for e in mine] == [
        (KEY_CREATED, made.prefix),
        (KEY_ROTATED, made.prefix),
        (KEY_REVOKED, caller.key.prefix),  # oldest key first
        (KEY_REVOKED, new.prefix),
    ]
    assert all(before <= e.at <= timezone.now() for e in mine)
    assert mine[1].detail["new_prefix"] == new.prefix and mine[1].detail["grace_minutes"] == 60
    assert (
        not ApiKey.objects.across_tenants("test")
        .filter(tenant=caller.tenant, revoked=False)
        .exclude(pk=made.pk)
        .exists()
    )
    tenant_page = admin_client.get(f"/admin/tenancy/tenant/{caller.tenant.pk}/change/").content.decode()
    assert caller.key.prefix in tenant_page  # the inline lists the keys
    assert 'name="api_keys-0-revoked"' not in tenant_page  # revoked from the key list only: recorded


# --- uses -----------------------------------------------------------------------------------------
def test_every_authenticated_request_is_counted_per_key(admin_client, client, caller, outsider):
    second = Caller("acme-2", tenant=caller.tenant)
    for _ in range(3):
        assert caller.get("/api/v1/whoami").status_code == 200
    assert second.get("/api/v1/whoami").status_code == 200
    assert outsider.get("/api/v1/whoami").status_code == 200
    assert whoami(f"{caller.key.prefix}.wrong-secret", client) == 401  # not a use
    api_key_revoke(key=second.key, actor="service", now=NOW)
    assert second.get("/api/v1/whoami").status_code == 401

    assert key_uses(caller.tenant) == {caller.key.prefix: 3, second.key.prefix: 1}
    assert key_uses(outsider.tenant) == {outsider.key.prefix: 1}
    counters.erase(caller.tenant.pk)  # what an erasure of the tenant's data wipes: not the key uses
    assert key_uses(caller.tenant)[caller.key.prefix] == 3

    page = admin_client.get("/admin/tenancy/apikey/").content.decode()
    rows = {
        re.search(r'field-prefix[^"]*"[^>]*>\s*([^<\s]+)', row)[1]: row
        for row in page.split("<tr")[1:]
        if "field-prefix" in row
    }

    def uses(row: str) -> str:
        return re.search(r'field-uses[^"]*"[^>]*>\s*([^<\s]+)', row)[1]

    assert (uses(rows[caller.key.prefix]), uses(rows[second.key.prefix])) == ("3", "1")
    assert uses(rows[outsider.key.prefix]) == "1"

    listing = StringIO()
    call_command("api_key", "list", "acme", stdout=listing)
    lines = {line.split()[0]: line for line in listing.getvalue().splitlines()}
    assert re.search(r"\b3 uses\b", lines[caller.key.prefix])
    assert re.search(r"\b1 uses\b", lines[second.key.prefix])


@pytest.mark.parametrize("page", ["/admin/tenancy/apikey/", "/admin/tenancy/auditevent/"])
def test_statements_of_the_key_and_audit_lists_do_not_grow_with_tenants(admin_client, page):
    def statements(tenants: int) -> int:
        for n in range(tenants):
            caller = Caller(f"{page}-{tenants}-{n}")
            caller.get("/api/v1/whoami")
            api_key_rotate(key=caller.key, actor="service", now=NOW)
        admin_client.get(page)
        with CaptureQueriesContext(connection) as queries:
            assert admin_client.get(page).status_code == 200
        return len(queries)

    assert statements(1) == statements(15)


# --- operators ------------------------------------------------------------------------------------
def test_an_operator_of_a_reads_the_events_of_a_and_none_of_b(client):
    a, b = Caller("alpha-co"), Caller("bravo-co")
    for caller in (a, b):
        api_key_rotate(key=caller.key, actor="service", now=NOW)
    user = get_user_model().objects.create_user("op-a", password=PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="tenancy"))
    TenantOperator.objects.create(user=user, tenant=a.tenant)
    assert client.login(username="op-a", password=PASSWORD)

    listed = client.get("/admin/tenancy/auditevent/").content.decode()
    assert a.key.prefix in listed and KEY_ROTATED in listed and a.tenant.name in listed
    assert b.tenant.name not in listed and b.key.prefix not in listed and str(b.tenant.pk) not in listed
    # filters and search (which echo what was asked for in the page) find nothing of B either
    for query in (f"tenant__id__exact={b.tenant.pk}", f"q={b.key.prefix}", f"action={KEY_ROTATED}"):
        response = client.get(f"/admin/tenancy/auditevent/?{query}")
        assert response.status_code == 200, query
        rows = [e.pk for e in response.context["cl"].result_list]
        assert not AuditEvent.objects.across_tenants("test").filter(pk__in=rows, tenant=b.tenant).exists(), (
            query
        )
        assert b.tenant.name not in response.content.decode(), query
    assert client.get(f"/admin/tenancy/auditevent/?q={a.key.prefix}").context["cl"].result_count == 2

    b_event = AuditEvent.objects.across_tenants("test").filter(tenant=b.tenant).first()
    response = client.get(f"/admin/tenancy/auditevent/{b_event.pk}/change/", follow=True)
    assert b.key.prefix not in response.content.decode()
    a_event = AuditEvent.objects.across_tenants("test").filter(tenant=a.tenant).first()
    assert a.key.prefix in client.get(f"/admin/tenancy/auditevent/{a_event.pk}/change/").content.decode()
    # read-only: nobody adds, changes or deletes an audit event
    assert client.get("/admin/tenancy/auditevent/add/").status_code == 403
    assert client.post(f"/admin/tenancy/auditevent/{a_event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AuditEvent.objects.across_tenants("test").filter(pk=a_event.pk).exists()


# --- no secret in any log -------------------------------------------------------------------------
@pytest.fixture
def every_log_record(caplog):
    """Every record of every logger at DEBUG (the SQL of django.db.backends included)."""
    caplog.set_level(logging.DEBUG)
    names = [name for name, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)]
    for name in names:
        caplog.set_level(logging.DEBUG, logger=name)
    deaf = [lg for lg in map(logging.getLogger, names) if not lg.propagate]
    for lg in deaf:
        lg.addHandler(caplog.handler)
    with CaptureQueriesContext(connection):  # the SQL is logged only with a debug cursor
        yield caplog
    for lg in deaf:
        lg.removeHandler(caplog.handler)


def test_no_api_key_appears_in_any_log(every_log_record, admin_client, client, caller):
    """The secrets created, rotated, sent (a good and a wrong one) through the services, the API,
    the console and the command line; none of them in the message, arguments or traceback of a
    record of any logger at DEBUG."""
    secrets = [caller.secret]
    key, secret = api_key_create(tenant=caller.tenant, name="logged?", actor="service", now=NOW)
    secrets.append(secret)
    assert whoami(secret, client) == 200
    wrong = f"{key.prefix}.{'Z' * 32}"
    secrets.append(wrong)
    assert whoami(wrong, client) == 401

    added = add_key_in_console(admin_client, caller.tenant)
    secrets += secrets_in(added.content.decode())
    rotated = admin_client.post(
        "/admin/tenancy/apikey/",
        {"action": "rotate_keys", "_selected_action": [key.pk, caller.key.pk], "grace": "0"},
    )
    from_console = secrets_in(rotated.content.decode())
    secrets += from_console
    assert all(whoami(s, client) == 200 for s in from_console)
    renewed = (
        ApiKey.objects.across_tenants("test")
        .filter(tenant=caller.tenant, revoked=False, name="logged?")
        .get()
    )
    admin_client.post("/admin/tenancy/apikey/", {"action": "revoke_keys", "_selected_action": [renewed.pk]})

    out = StringIO()
    call_command("api_key", "create", "acme", stdout=out, stderr=StringIO())
    made = out.getvalue().strip()
    call_command("api_key", "rotate", made.split(".")[0], stdout=out, stderr=StringIO())
    secrets += out.getvalue().split()
    call_command("api_key", "revoke", made.split(".")[0], stdout=StringIO())
    call_command("api_key", "list", "acme", stdout=StringIO())

    assert len(secrets) == 8 and all("." in s for s in secrets)
    records = every_log_record.records  # the test's own (pytest starts a new list for each phase)
    # Something was logged (the refused key, the statements, the console's template lookups), so
    # the check below can fail.
    assert any(r.name == "django.request" and "Unauthorized" in r.getMessage() for r in records)
    assert any(r.name == "django.db.backends" for r in records)
    assert any(r.name == "django.template" and "rotated" in str(r.exc_info) for r in records)
    formatter = logging.Formatter()
    for record in records:
        text = f"{record.getMessage()} {record.args!r} {formatter.format(record)}"
        for secret in secrets:
            body = secret.split(".", 1)[1]  # the part the prefix does not give away
            assert body not in text, (record.name, record.msg)
