"""Valid import bodies of the three formats, and everything an import could write, for the tests
that break those bodies (test_import_refusals, test_import_fuzz)."""

from __future__ import annotations

import copy
import json
from typing import Any

from episodes.stores import keys
from lifecycle.models import AccessWindow, MemoryPolicy
from memory_platform import counters
from memory_platform.redis_client import get_redis
from memory_platform.tenancy.models import AuditEvent
from tests.conftest import Caller

from .rights import ADMIN, lines, rows

HASHING = "tests.hashing_embedder.HashingEmbedder"

MEM0 = [
    {
        "id": "6f1c8d4e-0000-4000-8000-000000000001",
        "memory": "Prefers window seats on long flights",
        "user_id": "alice",
        "metadata": {"source": "chat"},
        "categories": ["travel"],
        "created_at": "2024-07-20T03:22:30.123456-07:00",
    },
    {
        "id": 2,
        "memory": "Bebe café au lait, 喜欢咖啡",
        "user_id": "alice",
        "run_id": "trip-42",
        "metadata": None,
    },
    {
        "id": "m-3",
        "memory": "Allergic to peanuts",
        "agent_id": "concierge",
        "created_at": "2024-07-21T10:00:00Z",
    },
]
TURNS = [
    {"id": "t-1", "role": "user", "text": "My sister lives in Porto.", "user_id": "bob", "session_id": "s"},
    {
        "role": "assistant",
        "text": "Noted: Porto, café included.",
        "user_id": "bob",
        "session_id": "s",
        "occurred_at": "2025-01-05T10:00:05Z",
        "metadata": {"n": 1},
    },
    {"id": 3, "role": "user", "text": "她五月来。", "user_id": "bob", "session_id": "s", "language": "zh"},
]


_EXPORT: list[dict[str, Any]] = []


def an_export() -> list[dict[str, Any]]:
    """The records of a small tenant's export: header, policy, an episode of two turns, two
    memories (one an anchor), a link, journal entries, counters and the end. Made once per run:
    they are data, whatever the test database holds afterwards."""
    if not _EXPORT:
        _EXPORT.extend(_export_of_a_new_tenant())
    return copy.deepcopy(_EXPORT)


def _export_of_a_new_tenant() -> list[dict[str, Any]]:
    source = Caller("bodies-source", scopes=ADMIN, embedder=HASHING)
    turns = [
        {"role": "user", "text": "My sister lives in Porto.", "user_id": "bob"},
        {"role": "assistant", "text": "Noted: Porto.", "user_id": "bob"},
    ]
    assert source.post("/api/v1/turns", {"turns": turns}).status_code in (200, 201, 202)
    made = [
        source.post("/api/v1/memories", {"text": text, "user_id": "bob", "tags": ["t"]}).json()["id"]
        for text in ("Bob is allergic to peanuts.", "Bob drinks green tea.")
    ]
    linked = source.post(f"/api/v1/memories/{made[0]}/links", {"target_id": made[1], "kind": "related"})
    assert linked.status_code < 300, linked.json()
    anchored = source.post(f"/api/v1/memories/{made[0]}/anchor")
    assert anchored.status_code < 300, anchored.json()
    counters.add(source.tenant.pk, "searches", 3)
    counters.observe(source.tenant.pk, "search_ms", 12.5, path="hot")
    response = source.get("/api/v1/export")
    assert response.status_code == 200
    records = lines(b"".join(response.streaming_content))
    kinds = [r.get("type") for r in records]
    assert kinds[:3] == ["header", "policy", "episode"], kinds
    assert {"turn", "link", "journal", "counters", "end"} <= set(kinds), kinds
    return records


def jsonl(records: list[Any]) -> bytes:
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in records).encode()


def holdings(caller: Caller) -> dict[str, Any]:
    """Everything an import could write for the tenant: its rows, policy, audit events, counters
    and Redis documents."""
    tenant = caller.tenant
    return {
        **rows(tenant),
        "access_windows": AccessWindow.objects.across_tenants("test").filter(tenant=tenant).count(),
        "policy": list(MemoryPolicy.objects.across_tenants("test").filter(tenant=tenant).values()),
        "audit": AuditEvent.objects.across_tenants("test").filter(tenant=tenant).count(),
        "counters": counters.fields_of(tenant.pk),
        "redis": sorted(get_redis().scan_iter(match=keys.tenant_pattern(tenant.pk.hex), count=1000)),
    }
