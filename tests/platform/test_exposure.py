"""Hardening finding 9 (exposure): credentials printed once and never stored in clear, a password
on the embedded Redis, private files, no key hash in admin URLs, a minimal /readyz for strangers
(tests/lifecycle/test_hot_quota.py), and `check --deploy` clean."""

from __future__ import annotations

import io
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from rest_framework.test import APIClient

from memory_platform.tenancy.models import ApiKey, Tenant
from tests.conftest import Caller

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _works(secret: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client.get("/api/v1/whoami").status_code


@pytest.mark.django_db
def test_bootstrap_prints_credentials_once_and_stores_none_in_clear():
    legacy = settings.VAR_DIR / "demo_credentials.json"
    legacy.write_text('{"api_key": "old"}')
    first, _ = _run("bootstrap")
    assert not legacy.exists()
    assert "shown once" in first
    secret = next(line.split()[2] for line in first.splitlines() if line.strip().startswith("API key"))
    assert _works(secret) == 200
    second, _ = _run("bootstrap")
    assert secret not in second and "user admin /" not in second
    assert "api_key create demo" in second
    # Nothing under var/ holds the secret.
    for path in settings.VAR_DIR.rglob("*"):
        if path.is_file() and path.stat().st_size < 1_000_000:
            assert secret.encode() not in path.read_bytes(), path


@pytest.mark.django_db
def test_api_key_command_creates_lists_rotates_and_revokes():
    tenant = Caller("keyed").tenant
    secret, said = _run("api_key", "create", "keyed", "--scopes", "read", "--name", "ci")
    secret = secret.strip()
    assert "shown once" in said and _works(secret) == 200
    prefix = secret.split(".")[0]
    listing, _ = _run("api_key", "list", "keyed")
    assert prefix in listing and secret not in listing and "read" in listing
    new, _ = _run("api_key", "rotate", prefix)
    new = new.strip()
    assert _works(new) == 200 and _works(secret) in (401, 403)
    rotated = ApiKey.objects.across_tenants("test").get(prefix=new.split(".")[0])
    assert (rotated.name, rotated.scopes, rotated.tenant) == ("ci", ["read"], tenant)
    _run("api_key", "revoke", new.split(".")[0])
    assert _works(new) in (401, 403)
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no tenant"):
        _run("api_key", "create", "nobody")
    with pytest.raises(CommandError, match="revoked already"):
        _run("api_key", "rotate", prefix)
    assert Tenant.objects.filter(name="nobody").count() == 0


def test_the_embedded_redis_wants_its_password_which_only_its_owner_can_read():
    server = settings.EMBEDDED_REDIS
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=server.port(), socket_timeout=5).ping()
    assert redis.Redis.from_url(server.url(), socket_timeout=5).ping()
    assert stat.S_IMODE(server.passwordfile.stat().st_mode) == 0o600
    assert stat.S_IMODE(server.datadir.stat().st_mode) == 0o700
    assert stat.S_IMODE((server.datadir / "redis.conf").stat().st_mode) == 0o600
    # Not on the command line, where any user of the machine could read it.
    cmdline = " ".join(psutil.Process(server.status().pid).cmdline())
    assert server.password() not in cmdline


@pytest.mark.django_db
def test_backups_are_private(tmp_path):
    out, _ = _run("backup")
    dump = Path(out.split()[1])
    assert stat.S_IMODE(dump.stat().st_mode) == 0o600
    assert stat.S_IMODE(dump.parent.stat().st_mode) == 0o700
    dump.unlink()


def _links(page: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', page)


def test_the_admin_never_puts_a_key_hash_in_a_url(admin_client):
    """A key's primary key is "<prefix>.<hash>"; URLs end up in access logs (the selection boxes
    send it in a POST body, which logs do not keep)."""
    from django.contrib.admin.utils import quote

    key = Caller("admin-keys").key
    for url in ("/admin/tenancy/apikey/", f"/admin/tenancy/tenant/{key.tenant_id}/change/"):
        page = admin_client.get(url).content.decode()
        assert key.prefix in page
        assert not [link for link in _links(page) if key.prefix in link or quote(key.pk) in link]
    added = admin_client.post(
        "/admin/tenancy/apikey/add/",
        {
            "name": "from the admin",
            "tenant": key.tenant_id,
            "scopes": "read",
            "expiry_date_0": "",
            "expiry_date_1": "",
        },
    )
    assert added.status_code == 302 and added["Location"] == "/admin/tenancy/apikey/"


def _deploy_check(**env: str) -> subprocess.CompletedProcess:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "MEMORY_", "DEBUG", "ALLOWED"))
    }
    environ.update(
        DEBUG="0",
        SECRET_KEY="x" * 20 + "deploy-check-key-with-enough-entropy-0123456789",
        MEMORY_VAR_DIR=str(settings.VAR_DIR),
        **env,
    )
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_on_loopback_and_behind_tls_and_warns_when_public_without_it():
    loopback = _deploy_check()
    assert loopback.returncode == 0, loopback.stdout + loopback.stderr
    tls = _deploy_check(MEMORY_HTTPS="1", ALLOWED_HOSTS="memory.example.com")
    assert tls.returncode == 0, tls.stdout + tls.stderr
    public = _deploy_check(ALLOWED_HOSTS="memory.example.com")
    assert public.returncode != 0 and "security.W008" in public.stdout + public.stderr
