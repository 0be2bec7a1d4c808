"""What the data-rights tests share: a tenant's history across every layer, and the
export and import calls."""

from __future__ import annotations

import json
from datetime import timedelta

from episodes.models import Episode, Link, Turn
from episodes.scope import Scope
from episodes.services import MemoryInput, TurnInput
from lifecycle.models import JournalEntry
from lifecycle.services import episode_pin, memory_create, turns_ingest
from lifecycle.tick import tick_run
from tests.conftest import Caller

from .factories import NOW, TOPICS

ADMIN = ("read", "write", "admin")


def build(tenant) -> dict[str, int]:
    """A history: three conversations of two users at different ages, a memory, a link, a pin,
    then a tick at NOW that packs the old ones."""
    ids = {}
    for i, texts in enumerate(TOPICS):
        at = NOW - timedelta(days=200 - 90 * i)
        result = turns_ingest(
            tenant=tenant,
            turns=[
                TurnInput(
                    role="user" if j % 2 == 0 else "assistant",
                    text=text,
                    scope=Scope.owner(user_id="u1" if i < 2 else "u2", session_id=f"s{i}"),
                    occurred_at=at + timedelta(seconds=30 * j),
                    episode_boundary=j == 0,
                )
                for j, text in enumerate(texts)
            ],
            now=at,
        )
        ids[f"topic{i}"] = result.episode_ids[0]
    fact = memory_create(
        tenant=tenant,
        memory=MemoryInput(
            text="Alice prefers green tea", kind="preference", scope=Scope.owner(user_id="u2")
        ),
        now=NOW - timedelta(days=3),
    )
    ids["fact"] = fact.pk
    Link.objects.create(
        tenant=tenant, src_id=ids["fact"], dst_id=ids["topic2"], kind="related", created_at=NOW
    )
    episode_pin(tenant=tenant, episode_id=ids["topic1"], anchor=True, now=NOW, actor="test")
    tick_run(tenant=tenant, now=NOW)
    return ids


def export(caller: Caller, **params) -> bytes:
    response = caller.get("/api/v1/export", params)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/x-ndjson"
    return b"".join(response.streaming_content)


def import_(caller: Caller, body: bytes, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return caller.client.post(
        f"/api/v1/import{'?' + query if query else ''}", body, content_type="application/x-ndjson"
    )


def lines(body: bytes) -> list[dict]:
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def rows(tenant) -> dict[str, int]:
    return {
        "episodes": Episode.objects.across_tenants("test").filter(tenant=tenant).count(),
        "turns": Turn.objects.across_tenants("test").filter(tenant=tenant).count(),
        "links": Link.objects.across_tenants("test").filter(tenant=tenant).count(),
        "journal": JournalEntry.objects.across_tenants("test").filter(tenant=tenant).count(),
    }
