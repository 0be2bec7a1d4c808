"""API keys in the console and on the command line: created and shown once with a copy
button, rotated with a grace period during which the old key keeps working, revoked."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from memory_platform.tenancy.models import ApiKey
from memory_platform.tenancy.services import api_key_rotate
from tests.conftest import Caller

pytestmark = pytest.mark.django_db(transaction=True)


def works(secret: str, client) -> bool:
    return client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200


def test_rotating_in_the_console_shows_the_new_secret_once_and_keeps_the_old_key_for_the_grace(
    admin_client, client
):
    caller = Caller("acme", scopes=("read", "admin"))
    chosen = {"action": "rotate_keys", "_selected_action": [caller.key.pk]}
    asked = admin_client.post("/admin/tenancy/apikey/", chosen).content.decode()
    assert (
        'name="grace"' in asked
        and ApiKey.objects.across_tenants("test").filter(tenant=caller.tenant).count() == 1
    )  # nothing yet

    page = admin_client.post("/admin/tenancy/apikey/", {**chosen, "grace": "60"})
    assert "no-store" in page["Cache-Control"]
    body = page.content.decode()
    new = ApiKey.objects.across_tenants("test").filter(tenant=caller.tenant).exclude(pk=caller.key.pk).get()
    assert new.scopes == ["read", "admin"] and new.name == caller.key.name
    secret = body.split('<code class="secret">')[1].split("</code>")[0]
    assert secret.startswith(new.prefix + ".") and 'class="copy-secret' in body
    assert works(secret, client) and works(caller.secret, client)  # both, during the grace
    old = ApiKey.objects.across_tenants("test").get(pk=caller.key.pk)
    assert timedelta(minutes=59) < old.expiry_date - timezone.now() <= timedelta(minutes=60)
    assert secret not in admin_client.get("/admin/tenancy/apikey/").content.decode()  # shown once


def test_an_expired_or_revoked_old_key_is_refused(client):
    caller = Caller("acme")
    now = timezone.now()
    _, secret = api_key_rotate(
        key=caller.key, actor="service", now=now - timedelta(hours=2), grace=timedelta(hours=1)
    )
    assert not works(caller.secret, client) and works(secret, client)  # the grace ended an hour ago
    other = Caller("beta")
    api_key_rotate(key=other.key, actor="service", now=now)  # no grace: revoked at once
    assert not works(other.secret, client)


def test_the_command_rotates_with_a_grace(client):
    caller = Caller("acme")
    out, err = StringIO(), StringIO()
    call_command("api_key", "rotate", caller.key.prefix, "--grace-minutes", "30", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    assert works(secret, client) and works(caller.secret, client)
    assert "works for 30 more minute(s)" in err.getvalue()
    listing = StringIO()
    call_command("api_key", "list", "acme", stdout=listing)
    assert listing.getvalue().count("active") == 2


def test_a_key_created_in_the_console_is_shown_once_with_a_copy_button(admin_client, client):
    tenant = Caller("acme").tenant
    added = admin_client.post(
        "/admin/tenancy/apikey/add/",
        {"name": "ci", "tenant": tenant.pk, "scopes": "read", "expiry_date_0": "", "expiry_date_1": ""},
        follow=True,
    )
    page = added.content.decode()
    secret = page.split('<code class="secret">')[1].split("</code>")[0]
    assert works(secret, client) and 'class="copy-secret' in page
    assert secret not in admin_client.get("/admin/tenancy/apikey/").content.decode()
