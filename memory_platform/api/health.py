"""Liveness and readiness probes."""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from memory_platform.redis_client import get_redis


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


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    checks = {"postgres": check_postgres(), "redis": check_redis()}
    failed = [name for name, result in checks.items() if not result["ok"]]
    body: dict[str, Any] = {"status": "ok" if not failed else "unavailable", "checks": checks}
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
