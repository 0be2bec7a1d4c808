"""Export and import (docs/decisions/0030): the round trip, importing twice and over existing data, bad
input, and moving in from mem0 and plain turns."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from episodes.models import Episode, Layer, Turn
from episodes.stores import keys
from episodes.stores.hot import hot_store
from lifecycle.models import JournalEntry
from lifecycle.rollback import RollbackError, rollback_journal_entry
from lifecycle.services import episode_pack
from memory_platform.embeddings import embedder_for
from memory_platform.tenancy.models import AuditEvent
from tests.conftest import Caller

from .factories import assert_consistent
from .rights import ADMIN, export, import_, lines, rows

pytestmark = pytest.mark.django_db(transaction=True)

QUERIES = [
    "When is the cello recital?",
    "Who owns the rollback plan for the migration?",
    "How much did the cabin near Lake Tahoe cost?",
    "What does Alice prefer to drink?",
    "grafana dashboards replication lag",
    "youth orchestra",
]


def shape(hit):
    """A hit without what moves with the clock (scores and explanations)."""
    if isinstance(hit, dict):
        return {k: shape(v) for k, v in hit.items() if k not in {"score", "explain", "scores"}}
    if isinstance(hit, list):
        return [shape(v) for v in hit]
    return hit


def test_round_trip_finds_the_same_episodes_with_the_same_shapes(source, target):
    layers = set(
        Episode.objects.across_tenants("test").filter(tenant=source.tenant).values_list("layer", flat=True)
    )
    assert layers == {"hot", "warm", "cold"}, "the history should span every layer"
    body = export(source)
    records = lines(body)
    assert records[0]["format"] == "memory-platform-export" and records[0]["version"] == 1
    assert records[0]["embedding"] == {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "dim": 384,
        "encoding": "base64-float32-le",
    }
    assert records[-1] == {"type": "end", "counts": records[-1]["counts"]}
    assert records[-1]["counts"]["episode"] == 4

    # The source holds the same public ids: importing them into another tenant touches nothing of it.
    source_rows = list(
        Episode.objects.across_tenants("test")
        .filter(tenant=source.tenant)
        .order_by("pk")
        .values_list("pk", "version")
    )
    response = import_(target, body)
    assert response.status_code == 200, response.json()
    report = response.json()
    assert report["episodes"] == {"created": 4} and report["vectors"] == "kept"
    assert (
        list(
            Episode.objects.across_tenants("test")
            .filter(tenant=source.tenant)
            .order_by("pk")
            .values_list("pk", "version")
        )
        == source_rows
    )
    assert (
        not Episode.objects.across_tenants("test")
        .filter(tenant=target.tenant, pk__in=[pk for pk, _ in source_rows])
        .exists()
    )
    assert report["policy"].startswith("applied")
    assert rows(target.tenant)["turns"] == rows(source.tenant)["turns"]
    assert rows(target.tenant)["links"] == 1
    assert_consistent(target.tenant)

    # One query vector for both: the local model's query encoder (ONNX once it is exported, torch
    # before) may differ in the last bits between two calls, which can swap near-tied turns.
    vectors = embedder_for(source.tenant).embed(QUERIES)
    for query, vector in zip(QUERIES, vectors, strict=True):
        body = {"query": query, "vector": vector.tolist(), "limit": 10, "include_dormant": True}
        found = [caller.post("/api/v1/search", body) for caller in (source, target)]
        assert all(r.status_code == 200 for r in found), [r.json() for r in found]
        a, b = (r.json()["results"] for r in found)
        assert a, query
        assert shape(a) == shape(b), query
    listed = [c.get("/api/v1/memories", {"limit": 50}).json()["results"] for c in (source, target)]
    assert shape(listed[0]) == shape(listed[1])


def test_importing_twice_changes_nothing(source, target):
    body = export(source)
    assert import_(target, body).status_code == 200
    before = rows(target.tenant)
    versions = list(
        Episode.objects.across_tenants("test")
        .filter(tenant=target.tenant)
        .order_by("pk")
        .values_list("public_id", "version")
    )
    again = import_(target, body)
    assert again.status_code == 200, again.json()
    assert again.json()["episodes"] == {"unchanged": 4}
    assert again.json()["journal"].get("created", 0) == 0
    assert rows(target.tenant) == before
    assert (
        list(
            Episode.objects.across_tenants("test")
            .filter(tenant=target.tenant)
            .order_by("pk")
            .values_list("public_id", "version")
        )
        == versions
    )


def test_import_over_existing_data_is_journaled_and_rolls_back_exactly(source, target):
    body = export(source)
    assert import_(target, body).status_code == 200
    # The target's copy of a hot episode moves on (an operator packs it); the export still says hot.
    hot = (
        Episode.objects.across_tenants("test")
        .filter(tenant=target.tenant, layer=Layer.HOT, kind="conversation")
        .first()
    )
    assert hot is not None
    episode_pack(tenant=target.tenant, episode_id=hot.pk, layer=Layer.WARM, now=timezone.now(), actor="test")
    packed = Episode.objects.across_tenants("test").get(pk=hot.pk)
    snapshot = {f.name: getattr(packed, f.name) for f in Episode._meta.concrete_fields if f.name != "version"}

    response = import_(target, body)
    assert response.json()["episodes"] == {"unchanged": 3, "updated": 1}
    entry = JournalEntry.objects.across_tenants("test").get(tenant=target.tenant, action="import")
    assert Episode.objects.across_tenants("test").get(pk=hot.pk).layer == Layer.HOT
    rollback_journal_entry(entry, now=timezone.now(), actor="test")
    restored = Episode.objects.across_tenants("test").get(pk=hot.pk)
    assert {f: getattr(restored, f) for f in snapshot if f != "search_vector"} == {
        f: v for f, v in snapshot.items() if f != "search_vector"
    }
    assert_consistent(target.tenant)


def test_an_import_that_adds_turns_rolls_back_to_without_them(source, target):
    body = export(source)
    assert import_(target, body).status_code == 200
    # The target lacks the last turn of a hot conversation (as if it was exported before it came).
    episode = (
        Episode.objects.across_tenants("test")
        .filter(tenant=target.tenant, layer=Layer.HOT, kind="conversation")
        .first()
    )
    assert episode is not None
    last = Turn.objects.across_tenants("test").filter(episode=episode).order_by("-seq").first()
    assert last is not None
    Turn.objects.across_tenants("test").filter(pk=last.pk).delete()
    Episode.objects.across_tenants("test").filter(pk=episode.pk).update(turn_count=episode.turn_count - 1)
    hot_store().client.unlink(keys.turn_key(target.tenant.pk.hex, last.pk))
    before = Episode.objects.across_tenants("test").get(pk=episode.pk)

    report = import_(target, body).json()
    assert report["episodes"] == {"unchanged": 3, "updated": 1} and report["turns"]["created"] == 1
    entry = JournalEntry.objects.across_tenants("test").get(tenant=target.tenant, action="import")
    assert entry.before == {"turn_count": episode.turn_count - 1}
    assert Turn.objects.across_tenants("test").filter(episode=episode, public_id=last.public_id).exists()
    assert_consistent(target.tenant)

    rollback_journal_entry(entry, now=timezone.now(), actor="test")
    assert not Turn.objects.across_tenants("test").filter(episode=episode, public_id=last.public_id).exists()
    assert Episode.objects.across_tenants("test").get(pk=episode.pk).turn_count == before.turn_count
    assert_consistent(target.tenant)
    # the history that came with the export is never rolled back here
    imported = (
        JournalEntry.objects.across_tenants("test").filter(tenant=target.tenant, after__imported=True).first()
    )
    assert imported is not None
    with pytest.raises(RollbackError, match="another system"):
        rollback_journal_entry(imported, now=timezone.now(), actor="test")


def test_export_filters_by_user_and_keeps_links_inside(source, target):
    records = lines(export(source, user_id="u2"))
    episodes = [r for r in records if r["type"] == "episode"]
    assert {r["user_id"] for r in episodes} == {"u2"} and len(episodes) == 2
    assert len([r for r in records if r["type"] == "link"]) == 1
    assert all(
        r["episode"] in {e["id"] for e in episodes} for r in records if r["type"] in {"turn", "journal"}
    )
    assert records[0]["filters"] == {"user_id": "u2"}


def test_an_outsider_exports_nothing_of_the_tenant(source, outsider):
    admin = Caller("outsider-admin", scopes=ADMIN, tenant=outsider.tenant)
    records = lines(export(admin))
    assert [r for r in records if r["type"] in {"episode", "turn", "link", "journal"}] == []
    assert source.tenant.name not in json.dumps(records)
    assert outsider.get("/api/v1/export").status_code == 403  # read/write keys do not export


def test_re_embeds_when_the_model_differs(source):
    body = export(source)
    provided = Caller("provided-target", scopes=ADMIN, embedder="provided")
    report = import_(provided, body).json()
    assert report["vectors"] == "left out"
    assert (
        not Turn.objects.across_tenants("test")
        .filter(tenant=provided.tenant, embedding__isnull=False)
        .exists()
    )
    # and the other way: a provided tenant's export, embedded again by a local one
    again = Caller("local-target", scopes=ADMIN)
    second = import_(again, export(provided)).json()
    assert second["vectors"] == "embedded again"
    assert (
        not Turn.objects.across_tenants("test").filter(tenant=again.tenant, embedding__isnull=True).exists()
    )


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r[:-1], "no end record"),
        (lambda r: [r[0], *r[2:]], "the end record counts"),
        (lambda r: [r[0], {"type": "wormhole"}, *r[1:]], "unknown record type"),
        (lambda r: [{**r[0], "version": 9}, *r[1:]], "version 9"),
        (lambda r: [r[0], r[1], {**r[2], "layer": "lukewarm"}, *r[3:]], "layer"),
        (lambda r: [r[0], r[1], {**r[2], "surprise": 1}, *r[3:]], "unknown episode fields"),
        (lambda r: [r[0], r[1], {**r[2], "embedding": "AAAA"}, *r[3:]], "a vector has 0 numbers"),
    ],
)
def test_a_bad_import_is_a_400_and_writes_nothing(source, target, edit, message):
    records = lines(export(source))
    body = "\n".join(json.dumps(r) for r in edit(records)).encode()
    policy_before = target.get("/api/v1/policy").json()
    response = import_(target, body)
    assert response.status_code == 400, response.json()
    assert message in json.dumps(response.json())
    assert rows(target.tenant) == {"episodes": 0, "turns": 0, "links": 0, "journal": 0}
    assert target.get("/api/v1/policy").json() == policy_before


def test_an_import_over_the_limit_is_a_413_and_writes_nothing(source, target):
    body = export(source)
    with override_settings(MEMORY={**settings.MEMORY, "MAX_IMPORT_BYTES": len(body) - 1}):
        response = import_(target, body)
    assert response.status_code == 413, response.json()
    assert rows(target.tenant)["episodes"] == 0


# --- moving in from elsewhere ------------------------------------------------------------------------
MEM0 = {
    "results": [
        {
            "id": "6f1c8d4e-0000-4000-8000-000000000001",
            "memory": "Prefers window seats on long flights",
            "user_id": "alice",
            "metadata": {"source": "chat"},
            "categories": ["travel"],
            "created_at": "2024-07-20T03:22:30.123456-07:00",
        },
        {
            "id": "6f1c8d4e-0000-4000-8000-000000000002",
            "memory": "Allergic to peanuts",
            "user_id": "alice",
            "agent_id": "concierge",
            "run_id": "trip-42",
            "metadata": None,
            "created_at": "2024-07-21T10:00:00Z",
        },
    ]
}


def test_mem0_memories_move_in_once(target):
    body = json.dumps(MEM0).encode()
    response = target.client.post("/api/v1/import", body, content_type="application/json")
    assert response.status_code == 200, response.json()
    assert response.json()["format"] == "mem0" and response.json()["episodes"] == {"created": 2}
    peanut = Episode.objects.across_tenants("test").get(
        tenant=target.tenant, metadata__mem0_id=MEM0["results"][1]["id"]
    )
    assert (peanut.user_id, peanut.agent_id, peanut.session_id) == ("alice", "concierge", "trip-42")
    seat = Episode.objects.across_tenants("test").get(
        tenant=target.tenant, metadata__mem0_id=MEM0["results"][0]["id"]
    )
    assert seat.tags == ["travel"] and seat.first_occurred_at == datetime(
        2024, 7, 20, 10, 22, 30, 123456, tzinfo=UTC
    )
    hits = target.post("/api/v1/search", {"query": "peanut allergy", "limit": 3}).json()["results"]
    assert hits[0]["episode_id"] == peanut.public_id
    again = target.client.post("/api/v1/import?source=mem0", body, content_type="application/json")
    assert again.json()["episodes"] == {"unchanged": 2}
    assert Episode.objects.across_tenants("test").filter(tenant=target.tenant).count() == 2


def test_plain_turns_move_in_once(target):
    turns = [
        {
            "session_id": "old-bot",
            "user_id": "bob",
            "role": "user",
            "text": "My sister lives in Porto.",
            "occurred_at": "2025-01-05T10:00:00Z",
        },
        {
            "session_id": "old-bot",
            "user_id": "bob",
            "role": "assistant",
            "text": "Noted: Porto.",
            "occurred_at": "2025-01-05T10:00:05Z",
        },
        {
            "id": "ext-3",
            "session_id": "old-bot",
            "user_id": "bob",
            "role": "user",
            "text": "She visits in May.",
        },
    ]
    body = "\n".join(json.dumps(t) for t in turns).encode()
    response = import_(target, body)
    assert response.status_code == 200, response.json()
    assert response.json()["format"] == "turns" and response.json()["turns"] == {"created": 3}
    assert import_(target, body).json()["turns"] == {"unchanged": 3}
    assert Turn.objects.across_tenants("test").filter(tenant=target.tenant).count() == 3
    missing_time = json.dumps({"session_id": "s", "role": "user", "text": "no time"}).encode()
    assert import_(target, missing_time).status_code == 400


def test_imports_are_audited(source, target):
    import_(target, export(source))
    actions = list(
        AuditEvent.objects.across_tenants("test")
        .filter(tenant__in=[source.tenant, target.tenant])
        .values_list("tenant__name", "action")
    )
    assert ("source", "export") in actions and ("target", "import") in actions
