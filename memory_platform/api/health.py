"""Liveness and readiness probes."""

from __future__ import annotations

import hmac
from typing import Any

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from memory_platform.redis_client import get_redis, refusing_writes

LOOPBACK = frozenset({"127.0.0.1", "::1"})


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def check_postgres() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('server_version')")
            version = cursor.fetchone()[0]
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cursor.fetchone()
    except Exception as exc:  # any driver error means "not ready"
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}".strip()}
    if row is None:
        return {"ok": False, "version": version, "error": "pgvector extension is not installed"}
    return {"ok": True, "version": version, "pgvector": row[0]}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def check_redis() -> dict[str, Any]:
    try:
        client = get_redis()
        info = client.info("server")
        modules = {_text(m[b"name"]): int(m[b"ver"]) for m in client.module_list()}
        persistence = client.info("persistence")
    except (redis.RedisError, OSError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    if persistence.get("loading"):
        return {
            "ok": False,
            "version": _text(info.get("redis_version", "")),
            "error": "redis is loading its data",
        }
    search = modules.get("search")
    if search is None:
        return {
            "ok": False,
            "version": _text(info.get("redis_version", "")),
            "error": "the search module is not loaded",
        }
    major, rest = divmod(int(search), 10000)
    minor, patch = divmod(rest, 100)
    return {"ok": True, "version": _text(info.get("redis_version", "")), "search": f"{major}.{minor}.{patch}"}


def may_see_details(request: HttpRequest) -> bool:
    """Versions and connection errors are for operators: a request from this machine that no
    proxy forwarded, or one bearing ``METRICS_TOKEN``. Everyone else sees the status only."""
    token = settings.METRICS_TOKEN
    sent = request.headers.get("Authorization", "")
    if token and hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
        return True
    forwarded = "X-Forwarded-For" in request.headers or "Forwarded" in request.headers
    return request.META.get("REMOTE_ADDR") in LOOPBACK and not forwarded


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """503 when Postgres or Redis cannot serve; "degraded" (200) when Redis answers but refuses
    writes (full): the platform still takes turns and answers searches, new hot episodes wait."""
    checks = {"postgres": check_postgres(), "redis": check_redis()}
    failed = [name for name, result in checks.items() if not result["ok"]]
    refused = refusing_writes(get_redis()) if not failed else ""
    if refused:
        checks["redis"].update(writable=False, error=refused)
    status = "unavailable" if failed else "degraded" if refused else "ok"
    if not may_see_details(request):
        return JsonResponse({"status": status}, status=503 if failed else 200)
    body: dict[str, Any] = {"status": status, "checks": checks}
    if failed:
        body["error"] = {
            "code": "service_unavailable",
            "message": f"not ready: {', '.join(failed)} unavailable",
            "details": {name: checks[name].get("error") for name in failed},
        }
    body["embedded"] = {
        "postgres": settings.EMBEDDED_POSTGRES is not None,
        "redis": settings.EMBEDDED_REDIS is not None,
    }
    return JsonResponse(body, status=503 if failed else 200)
