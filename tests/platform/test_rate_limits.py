"""Rate limits per key and per tenant, and failed logins: invalid API keys and console logins in
separate windows, per user name as well as per address, and with Redis stopped
(docs/decisions/0009, 0036)."""

import logging

import pytest
from django.conf import settings as django_settings
from django.test import Client, override_settings

from memory_platform.ratelimit import Rate
from memory_platform.redis_client import get_redis
from memory_platform.tenancy.login_throttle import DEVICE_COOKIE
from memory_platform.tenancy.models import Tenant

from ..conftest import Caller

pytestmark = pytest.mark.django_db

LIMITS = {
    "RATE_LIMIT": "5/min",
    "TENANT_RATE_LIMIT": "8/min",
    "AUTH_FAILURE_LIMIT": "3/min",
    "LOGIN_USER_FAILURE_LIMIT": "5/min",
}
PASSWORD = "pw-12345678"


def _memory(**changes):
    return {**django_settings.MEMORY, **LIMITS, **changes}


def _operator():
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)


def _login(client, password, address="198.51.100.7", username="op"):
    return client.post("/admin/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def _bad_keys(client, count, **extra):
    return [
        client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer nope.{i}", **extra).status_code
        for i in range(count)
    ]


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


def test_invalid_api_keys_from_one_address_are_throttled_and_a_valid_key_still_answers(client, caller):
    with override_settings(MEMORY=_memory()):
        assert _bad_keys(client, 5) == [401, 401, 401, 429, 429]
        # Another address is not held up by it; a valid key from the throttled one is answered.
        assert _bad_keys(client, 1, REMOTE_ADDR="192.0.2.44") == [401]
        assert caller.get("/api/v1/whoami").status_code == 200


def test_invalid_api_keys_do_not_keep_an_operator_out_of_the_console(client):
    _operator()
    with override_settings(MEMORY=_memory()):
        assert _bad_keys(client, 25, REMOTE_ADDR="198.51.100.7") == [401] * 3 + [429] * 22
        response = _login(client, PASSWORD, address="198.51.100.7")
        assert response.status_code == 302
        assert client.get("/admin/", REMOTE_ADDR="198.51.100.7").status_code == 200  # logged in


def test_failed_console_logins_are_throttled_per_address(client):
    _operator()
    with override_settings(MEMORY=_memory()):
        codes = [_login(client, f"wrong-{i}").status_code for i in range(5)]
        assert codes == [200, 200, 200, 429, 429]  # the form again with its error, then 429
        # Even the right password waits out the window from that address (it is not checked)...
        assert _login(client, PASSWORD).status_code == 429
        # ...but the operator elsewhere gets in: one address cannot lock a user name out.
        assert _login(Client(), PASSWORD, address="203.0.113.20").status_code == 302
        # Other user names from the attacker's address wait too.
        assert _login(client, "x", username="someone-else").status_code == 429


def test_one_user_name_is_not_guessed_from_many_addresses_but_its_browser_still_gets_in(client):
    _operator()
    with override_settings(MEMORY=_memory()):
        browser = Client()
        assert _login(browser, PASSWORD, address="203.0.113.20").status_code == 302
        assert browser.cookies[DEVICE_COOKIE]["httponly"]
        # The same browser another day: its session has ended, the device cookie is kept.
        known = Client()
        known.cookies[DEVICE_COOKIE] = browser.cookies[DEVICE_COOKIE].value

        # Two failures from each of three addresses: under the per-address limit (3), over the
        # user name's (5) together.
        codes = [_login(client, f"wrong-{i}", address=f"192.0.2.{i // 2}").status_code for i in range(6)]
        assert codes == [200] * 5 + [429]
        # A fresh address with the right password is refused: the name is being guessed.
        assert _login(Client(), PASSWORD, address="192.0.2.200").status_code == 429
        assert _login(Client(), PASSWORD, address="192.0.2.200", username="OP").status_code == 429
        # The browser that logged in before has its own window, wherever it is now.
        assert _login(known, PASSWORD, address="192.0.2.0").status_code == 302

        # A device cookie is the user name's own: it does not open another's window, and a forged
        # one is no cookie at all.
        stranger = Client()
        stranger.cookies[DEVICE_COOKIE] = known.cookies[DEVICE_COOKIE].value
        assert _login(stranger, "x", address="192.0.2.201", username="another").status_code == 200
        stranger.cookies[DEVICE_COOKIE] = "forged:" + "0" * 32
        assert _login(stranger, PASSWORD, address="192.0.2.201").status_code == 429


def test_x_forwarded_for_is_read_only_from_a_trusted_proxy(client):
    spoofed = [{"HTTP_X_FORWARDED_FOR": f"203.0.113.{i}"} for i in range(5)]
    with override_settings(MEMORY=_memory()):
        # From an untrusted peer the header is ignored: every guess is the peer's.
        codes = [_bad_keys(client, 1, REMOTE_ADDR="192.0.2.9", **h)[0] for h in spoofed]
        assert codes == [401, 401, 401, 429, 429]

    with override_settings(MEMORY=_memory(TRUSTED_PROXIES=["10.0.0.0/8"])):
        proxy = {"REMOTE_ADDR": "10.1.2.3"}
        # Through the trusted proxy each client has its own window...
        assert _bad_keys(client, 4, **proxy, HTTP_X_FORWARDED_FOR="198.51.100.1") == [401] * 3 + [429]
        assert _bad_keys(client, 1, **proxy, HTTP_X_FORWARDED_FOR="198.51.100.2") == [401]
        # ...and what a client writes to the left of the address the proxy appended is not its.
        forged = [
            _bad_keys(client, 1, **proxy, HTTP_X_FORWARDED_FOR=f"203.0.113.{i}, 198.51.100.3")[0]
            for i in range(4)
        ]
        assert forged == [401] * 3 + [429]
        # A chain of trusted proxies is walked from the right.
        chain = "198.51.100.4, 10.9.9.9"
        assert _bad_keys(client, 4, **proxy, HTTP_X_FORWARDED_FOR=chain) == [401] * 3 + [429]
        # The console login reads the same address.
        _operator()

        def login(password, forwarded):
            return Client().post(
                "/admin/login/",
                {"username": "op", "password": password},
                HTTP_X_FORWARDED_FOR=forwarded,
                **proxy,
            )

        assert [login(f"w{i}", "198.51.100.5").status_code for i in range(3)] == [200] * 3
        assert login(PASSWORD, "198.51.100.5").status_code == 429
        assert login(PASSWORD, "198.51.100.6").status_code == 302


def test_limits_hold_while_redis_is_stopped(client, caller, caplog):
    _operator()
    server = django_settings.EMBEDDED_REDIS
    assert server is not None
    server.stop()
    try:
        with override_settings(MEMORY=_memory()), caplog.at_level(logging.INFO, "memory_platform.ratelimit"):
            assert _bad_keys(client, 6, REMOTE_ADDR="192.0.2.77") == [401] * 3 + [429] * 3
            assert [caller.get("/api/v1/whoami").status_code for _ in range(6)] == [200] * 5 + [429]
            codes = [_login(client, f"wrong-{i}", address="192.0.2.78").status_code for i in range(4)]
            assert codes == [200, 200, 200, 429]
            assert _login(Client(), PASSWORD, address="192.0.2.79").status_code == 302
        switches = [r for r in caplog.records if "counted in this process" in r.getMessage()]
        assert len(switches) == 1  # once, not per request
    finally:
        server.start()
        get_redis().connection_pool.disconnect()
    with override_settings(MEMORY=_memory()):
        # Redis again: counting is shared there, starting from Redis's own windows.
        assert caller.get("/api/v1/whoami").status_code == 200
