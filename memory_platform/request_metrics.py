"""Request latency per route, method and status class, counted for ``GET /metrics``."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from . import counters


class RequestMetricsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = request.resolver_match
        # The route's name, never the path: ids and tokens in paths would make a label per request.
        route = (match.view_name or match.route) if match else "unmatched"
        counters.observe(
            counters.PLATFORM,
            "request_ms",
            (time.perf_counter() - started) * 1000,
            route=route,
            method=request.method if request.method in _METHODS else "other",
            status=f"{response.status_code // 100}xx",
        )
        return response


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
