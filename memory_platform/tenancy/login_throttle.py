"""Failed logins are counted per client address; past ``MEMORY_AUTH_FAILURE_LIMIT`` the address
gets 429 until the window ends (admin logins here; API keys in ``authentication``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from memory_platform.conf import memory_settings
from memory_platform.ratelimit import Rate, hit, over


def client_address(request: Any) -> str:
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def failure_rate() -> Rate:
    return Rate.parse(str(memory_settings.AUTH_FAILURE_LIMIT))


def count_failure(address: str) -> float | None:
    """Count one failed login from ``address``: the seconds to wait when it is over the limit."""
    return hit(f"authfail:{address}", failure_rate(), time.time())


def record_failed_login(
    sender: Any, credentials: Any, request: HttpRequest | None = None, **kwargs: Any
) -> None:
    """`user_login_failed`: an admin login failed."""
    if request is not None:
        count_failure(client_address(request))


class LoginThrottleMiddleware:
    """Refuses admin login attempts from an address whose failures are over the limit."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method == "POST" and request.path.endswith("/login/"):
            wait = over(f"authfail:{client_address(request)}", failure_rate(), time.time())
            if wait is not None:
                response = JsonResponse(
                    {
                        "error": {
                            "code": "throttled",
                            "message": "too many failed logins; try later",
                            "details": {},
                        }
                    },
                    status=429,
                )
                response["Retry-After"] = str(int(wait) + 1)
                return response
        return self.get_response(request)
