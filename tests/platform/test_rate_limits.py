"""Rate limits per key, per tenant and for failed logins (hardening finding 4: 200 wrong admin
passwords and 300 invalid API keys in a row never met a 429)."""

import pytest
from django.test import override_settings

from memory_platform.ratelimit import Rate
from memory_platform.tenancy.models import Tenant

from ..conftest import Caller

pytestmark = pytest.mark.django_db

LIMITS = {"RATE_LIMIT": "5/min", "TENANT_RATE_LIMIT": "8/min", "AUTH_FAILURE_LIMIT": "3/min"}


def _memory(**changes):
    from django.conf import settings

    return {**settings.MEMORY, **LIMITS, **changes}


def test_rates_parse_and_refuse_nonsense():
    assert Rate.parse("5/s") == Rate(5, 1) and Rate.parse("120/min") == Rate(120, 60)
    for bad in ("", "5", "0/s", "5/hour", "five/s"):
        with pytest.raises(ValueError):
            Rate.parse(bad)


def test_a_key_over_its_rate_gets_429_with_retry_after(caller):
    with override_settings(MEMORY=_memory()):
        codes = [caller.get("/api/v1/whoami").status_code for _ in range(6)]
        assert codes == [200] * 5 + [429]
        response = caller.get("/api/v1/whoami")
        assert response.json()["error"]["code"] == "throttled"
        assert 1 <= int(response["Retry-After"]) <= 60
        # Another tenant is not slowed by it.
        other = Caller("other-tenant")
        assert other.get("/api/v1/whoami").status_code == 200


def test_a_tenants_keys_together_and_a_tenants_own_rate(caller):
    second = Caller("second key", tenant=caller.tenant)
    with override_settings(MEMORY=_memory()):
        first = [caller.get("/api/v1/whoami").status_code for _ in range(5)]
        rest = [second.get("/api/v1/whoami").status_code for _ in range(4)]
        assert first == [200] * 5 and rest == [200, 200, 200, 429]  # 8 a minute for the tenant

    Tenant.objects.filter(pk=caller.tenant.pk).update(rate_limit="2/min")
    third = Caller("third key", tenant=caller.tenant)
    with override_settings(MEMORY=_memory(TENANT_RATE_LIMIT="100/min")):
        assert [third.get("/api/v1/whoami").status_code for _ in range(3)] == [200, 200, 429]


def test_invalid_api_keys_from_one_address_are_throttled(client):
    with override_settings(MEMORY=_memory()):
        codes = [
            client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer nope.{i}").status_code for i in range(5)
        ]
        assert codes == [401, 401, 401, 429, 429]


def test_failed_admin_logins_are_throttled(client, admin_client):
    with override_settings(MEMORY=_memory()):
        codes = [
            client.post("/admin/login/", {"username": "op", "password": f"wrong-{i}"}).status_code
            for i in range(5)
        ]
        assert codes[:3] == [200, 200, 200]  # the form again, with its error
        assert codes[3:] == [429, 429]
        # Even the right password waits out the window from that address.
        assert client.post("/admin/login/", {"username": "op", "password": "pw-12345678"}).status_code == 429
