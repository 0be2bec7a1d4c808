"""Failed logins: how many a client may make before it waits (docs/decisions/0036).

Invalid API keys and console logins are counted apart, so a flood of bad keys never keeps an
operator out of the console:

- invalid API keys: ``MEMORY_AUTH_FAILURE_LIMIT`` per client address (a valid key is always
  answered, whatever its address did);
- console logins from a browser without a device cookie: ``MEMORY_AUTH_FAILURE_LIMIT`` per client
  address (whatever user names it tries), and ``MEMORY_LOGIN_USER_FAILURE_LIMIT`` per user name
  (from every address together, so many addresses cannot share out the guessing of one password);
- console logins from a browser with the device cookie of that user name, which a successful
  login sets: ``MEMORY_AUTH_FAILURE_LIMIT`` for that cookie alone. An operator who has logged in
  from this browser before gets in while others fill the address and user-name windows.

Past a limit the answer is 429 until the window ends, even to the right password: the throttle
is consulted before the password is.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import unicodedata
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse, JsonResponse

from memory_platform.client_address import client_address, throttle_key
from memory_platform.conf import memory_settings
from memory_platform.ratelimit import Rate, hit_all, over_all

DEVICE_COOKIE = "mp_login_device"
_DEVICE_SALT = "memory_platform.tenancy.login_throttle.device"
DEVICE_MAX_AGE = timedelta(days=180)

Buckets = list[tuple[str, Rate]]


def failure_rate() -> Rate:
    return Rate.parse(str(memory_settings.AUTH_FAILURE_LIMIT))


def user_failure_rate() -> Rate:
    return Rate.parse(str(memory_settings.LOGIN_USER_FAILURE_LIMIT))


def api_key_failure(request: Any, now: float) -> float | None:
    """Count one invalid API key from the request's client: the seconds to wait when its address
    is over the limit."""
    address = throttle_key(client_address(request.META))
    return hit_all([(f"authfail:api:{address}", failure_rate())], now)


def _user_key(username: str) -> str:
    """A user name as the login form compares it (NFKC), folded for case so that ``Op`` and ``op``
    share a window, and hashed so that a long name cannot make a long key."""
    folded = unicodedata.normalize("NFKC", username.strip()).casefold()
    return hashlib.sha256(folded.encode()).hexdigest()[:32]


def _device(request: HttpRequest, username: str) -> str | None:
    """The device cookie's id when the request carries a valid one for ``username``."""
    value = request.get_signed_cookie(DEVICE_COOKIE, default=None, salt=_DEVICE_SALT, max_age=DEVICE_MAX_AGE)
    if not value:
        return None
    device, _, user = value.partition(":")
    return device if user == _user_key(username) else None


def login_buckets(request: HttpRequest, username: str) -> Buckets:
    """The windows a console login of ``username`` from this request is counted in."""
    device = _device(request, username)
    if device is not None:
        return [(f"authfail:login:device:{device}", failure_rate())]
    address = throttle_key(client_address(request.META))
    return [
        (f"authfail:login:addr:{address}", failure_rate()),
        (f"authfail:login:user:{_user_key(username)}", user_failure_rate()),
    ]


def record_failed_login(
    sender: Any, credentials: Any, request: HttpRequest | None = None, **kwargs: Any
) -> None:
    """`user_login_failed`: a console login failed."""
    if request is not None:
        username = str(credentials.get(get_user_model().USERNAME_FIELD) or "")
        hit_all(login_buckets(request, username), time.time())


def _set_device_cookie(request: HttpRequest, response: HttpResponse) -> None:
    username = request.user.get_username()
    if _device(request, username) is not None:
        return
    response.set_signed_cookie(
        DEVICE_COOKIE,
        f"{secrets.token_urlsafe(12)}:{_user_key(username)}",
        salt=_DEVICE_SALT,
        max_age=int(DEVICE_MAX_AGE.total_seconds()),
        secure=settings.SESSION_COOKIE_SECURE,
        httponly=True,
        samesite="Lax",
    )


def _throttled(wait: float) -> JsonResponse:
    response = JsonResponse(
        {"error": {"code": "throttled", "message": "too many failed logins; try later", "details": {}}},
        status=429,
    )
    response["Retry-After"] = str(int(wait) + 1)
    return response


class LoginThrottleMiddleware:
    """Refuses console logins whose windows are full, before the password is checked, and gives
    the browser of a successful login its device cookie."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method != "POST" or not request.path.endswith("/login/"):
            return self.get_response(request)
        username = str(request.POST.get(get_user_model().USERNAME_FIELD) or "")
        wait = over_all(login_buckets(request, username), time.time())
        if wait is not None:
            return _throttled(wait)
        response = self.get_response(request)
        if response.status_code == 302 and request.user.is_authenticated:
            _set_device_cookie(request, response)
        return response
