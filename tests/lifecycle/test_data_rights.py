"""Data rights (issue 19): export, import (this platform's, mem0's, plain turns) and erasure."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from episodes.models import Episode, ForgottenUser, Layer, Link, Turn
from episodes.scope import Scope
from episodes.services import MemoryInput, TurnInput
from episodes.stores import keys
from episodes.stores.hot import hot_store
from lifecycle import erasure
from lifecycle.models import JournalEntry, TickRun
from lifecycle.rollback import RollbackError, rollback_journal_entry
from lifecycle.services import episode_pack, episode_pin, memory_create, turns_ingest
from lifecycle.tick import tick_run
from memory_platform.embeddings import embedder_for
from memory_platform.redis_client import get_redis
from memory_platform.tenancy.models import AuditEvent
from tests.conftest import Caller

from .factories import TOPICS, assert_consistent

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = ("read", "write", "admin")
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
QUERIES = [
    "When is the cello recital?",
    "Who owns the rollback plan for the migration?",
    "How much did the cabin near Lake Tahoe cost?",
    "What does Alice prefer to drink?",
    "grafana dashboards replication lag",
    "youth orchestra",
]


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


def shape(hit):
    """A hit without what moves with the clock (scores and explanations)."""
    if isinstance(hit, dict):
        return {k: shape(v) for k, v in hit.items() if k not in {"score", "explain", "scores"}}
    if isinstance(hit, list):
        return [shape(v) for v in hit]
    return hit


def rows(tenant) -> dict[str, int]:
    return {
        "episodes": Episode.objects.filter(tenant=tenant).count(),
        "turns": Turn.objects.filter(tenant=tenant).count(),
        "links": Link.objects.filter(tenant=tenant).count(),
        "journal": JournalEntry.objects.filter(tenant=tenant).count(),
    }


@pytest.fixture
def source(db) -> Caller:
    caller = Caller("source", scopes=ADMIN)
    caller.ids = build(caller.tenant)  # type: ignore[attr-defined]
    return caller


@pytest.fixture
def target(db) -> Caller:
    return Caller("target", scopes=ADMIN)


# --- export and import: the round trip ---------------------------------------------------------------
def test_round_trip_finds_the_same_episodes_with_the_same_shapes(source, target):
    layers = set(Episode.objects.filter(tenant=source.tenant).values_list("layer", flat=True))
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
        Episode.objects.filter(tenant=source.tenant).order_by("pk").values_list("pk", "version")
    )
    response = import_(target, body)
    assert response.status_code == 200, response.json()
    report = response.json()
    assert report["episodes"] == {"created": 4} and report["vectors"] == "kept"
    assert (
        list(Episode.objects.filter(tenant=source.tenant).order_by("pk").values_list("pk", "version"))
        == source_rows
    )
    assert not Episode.objects.filter(tenant=target.tenant, pk__in=[pk for pk, _ in source_rows]).exists()
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
        Episode.objects.filter(tenant=target.tenant).order_by("pk").values_list("public_id", "version")
    )
    again = import_(target, body)
    assert again.status_code == 200, again.json()
    assert again.json()["episodes"] == {"unchanged": 4}
    assert again.json()["journal"].get("created", 0) == 0
    assert rows(target.tenant) == before
    assert (
        list(Episode.objects.filter(tenant=target.tenant).order_by("pk").values_list("public_id", "version"))
        == versions
    )


def test_import_over_existing_data_is_journaled_and_rolls_back_exactly(source, target):
    body = export(source)
    assert import_(target, body).status_code == 200
    # The target's copy of a hot episode moves on (an operator packs it); the export still says hot.
    hot = Episode.objects.filter(tenant=target.tenant, layer=Layer.HOT, kind="conversation").first()
    assert hot is not None
    episode_pack(tenant=target.tenant, episode_id=hot.pk, layer=Layer.WARM, now=timezone.now(), actor="test")
    packed = Episode.objects.get(pk=hot.pk)
    snapshot = {f.name: getattr(packed, f.name) for f in Episode._meta.concrete_fields if f.name != "version"}

    response = import_(target, body)
    assert response.json()["episodes"] == {"unchanged": 3, "updated": 1}
    entry = JournalEntry.objects.get(tenant=target.tenant, action="import")
    assert Episode.objects.get(pk=hot.pk).layer == Layer.HOT
    rollback_journal_entry(entry, now=timezone.now(), actor="test")
    restored = Episode.objects.get(pk=hot.pk)
    assert {f: getattr(restored, f) for f in snapshot if f != "search_vector"} == {
        f: v for f, v in snapshot.items() if f != "search_vector"
    }
    assert_consistent(target.tenant)


def test_an_import_that_adds_turns_rolls_back_to_without_them(source, target):
    body = export(source)
    assert import_(target, body).status_code == 200
    # The target lacks the last turn of a hot conversation (as if it was exported before it came).
    episode = Episode.objects.filter(tenant=target.tenant, layer=Layer.HOT, kind="conversation").first()
    assert episode is not None
    last = Turn.objects.filter(episode=episode).order_by("-seq").first()
    assert last is not None
    Turn.objects.filter(pk=last.pk).delete()
    Episode.objects.filter(pk=episode.pk).update(turn_count=episode.turn_count - 1)
    hot_store().client.unlink(keys.turn_key(target.tenant.pk.hex, last.pk))
    before = Episode.objects.get(pk=episode.pk)

    report = import_(target, body).json()
    assert report["episodes"] == {"unchanged": 3, "updated": 1} and report["turns"]["created"] == 1
    entry = JournalEntry.objects.get(tenant=target.tenant, action="import")
    assert entry.before == {"turn_count": episode.turn_count - 1}
    assert Turn.objects.filter(episode=episode, public_id=last.public_id).exists()
    assert_consistent(target.tenant)

    rollback_journal_entry(entry, now=timezone.now(), actor="test")
    assert not Turn.objects.filter(episode=episode, public_id=last.public_id).exists()
    assert Episode.objects.get(pk=episode.pk).turn_count == before.turn_count
    assert_consistent(target.tenant)
    # the history that came with the export is never rolled back here
    imported = JournalEntry.objects.filter(tenant=target.tenant, after__imported=True).first()
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
    assert not Turn.objects.filter(tenant=provided.tenant, embedding__isnull=False).exists()
    # and the other way: a provided tenant's export, embedded again by a local one
    again = Caller("local-target", scopes=ADMIN)
    second = import_(again, export(provided)).json()
    assert second["vectors"] == "embedded again"
    assert not Turn.objects.filter(tenant=again.tenant, embedding__isnull=True).exists()


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
    peanut = Episode.objects.get(tenant=target.tenant, metadata__mem0_id=MEM0["results"][1]["id"])
    assert (peanut.user_id, peanut.agent_id, peanut.session_id) == ("alice", "concierge", "trip-42")
    seat = Episode.objects.get(tenant=target.tenant, metadata__mem0_id=MEM0["results"][0]["id"])
    assert seat.tags == ["travel"] and seat.first_occurred_at == datetime(
        2024, 7, 20, 10, 22, 30, 123456, tzinfo=UTC
    )
    hits = target.post("/api/v1/search", {"query": "peanut allergy", "limit": 3}).json()["results"]
    assert hits[0]["episode_id"] == peanut.public_id
    again = target.client.post("/api/v1/import?source=mem0", body, content_type="application/json")
    assert again.json()["episodes"] == {"unchanged": 2}
    assert Episode.objects.filter(tenant=target.tenant).count() == 2


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
    assert Turn.objects.filter(tenant=target.tenant).count() == 3
    missing_time = json.dumps({"session_id": "s", "role": "user", "text": "no time"}).encode()
    assert import_(target, missing_time).status_code == 400


def test_imports_are_audited(source, target):
    import_(target, export(source))
    actions = list(
        AuditEvent.objects.filter(tenant__in=[source.tenant, target.tenant]).values_list(
            "tenant__name", "action"
        )
    )
    assert ("source", "export") in actions and ("target", "import") in actions


# --- erasure -----------------------------------------------------------------------------------------
def redis_holdings(tenant) -> dict[str, int]:
    client = get_redis()
    return {
        "keys": sum(1 for _ in client.scan_iter(match=keys.tenant_pattern(tenant.pk.hex))),
        "indexes": sum(1 for n in client.execute_command("FT._LIST") if tenant.pk.hex in str(n)),
    }


def queued_for(tenant) -> int:
    from django_q.models import OrmQ

    return sum(
        1
        for row in OrmQ.objects.all()
        if str(tenant.pk) in json.dumps(row.task.get("kwargs", {}), default=str)
    )


def test_tables_with_a_tenant_column_are_each_erased_or_kept():
    tables = {m._meta.label_lower for m in erasure.tenant_tables()}
    assert tables == {m._meta.label_lower for m in erasure.ERASED} | erasure.KEPT


def test_tenant_data_erasure_asks_first_then_leaves_nothing(source, outsider):
    tenant = source.tenant
    # something waiting in the task queue (no worker runs in the tests)
    queued = source.post(
        "/api/v1/turns",
        {"session_id": "late", "async": True, "turns": [{"role": "user", "text": "late words"}]},
    )
    assert queued.status_code == 201 and queued.json()["queued"]
    assert queued_for(tenant) >= 1
    other = rows(outsider.tenant)
    outsider.post("/api/v1/memories", {"text": "the outsider keeps this"})

    first = source.delete("/api/v1/tenant-data")
    assert first.status_code == 200, first.json()
    assert first.json()["will_erase"]["episodes.episode"] == 5
    assert Episode.objects.filter(tenant=tenant).count() == 5  # nothing changed yet
    assert source.delete("/api/v1/tenant-data", {"confirm": "forged"}).status_code == 409
    assert outsider.delete("/api/v1/tenant-data", {"confirm": first.json()["confirm"]}).status_code == 403

    second = source.delete("/api/v1/tenant-data", {"confirm": first.json()["confirm"]})
    assert second.status_code == 200, second.json()
    receipt = second.json()
    assert receipt["verification"]["clean"] is True
    assert receipt["removed"]["postgres"]["episodes.episode"] == 5
    assert receipt["removed"]["redis"]["documents"] > 0
    assert receipt["removed"]["queue"]["queued_tasks"] >= 1
    # our own scan, every table with a tenant column
    for model in erasure.tenant_tables():
        if model._meta.label_lower not in erasure.KEPT:
            assert not model._default_manager.filter(tenant=tenant).exists(), model
    assert redis_holdings(tenant) == {"keys": 0, "indexes": 0}
    assert queued_for(tenant) == 0
    assert not get_redis().exists(f"mp:metrics:{tenant.pk}")
    # the tenant, its policy and keys stay, and it works on
    assert source.get("/api/v1/policy").status_code == 200
    assert source.post("/api/v1/memories", {"text": "a fresh start"}).status_code == 201
    assert AuditEvent.objects.filter(tenant=tenant, action="erasure").count() == 1
    # the outsider is untouched
    assert rows(outsider.tenant)["episodes"] == other["episodes"] + 1
    assert outsider.post("/api/v1/search", {"query": "outsider keeps"}).json()["results"]


def test_forgetting_a_user_erases_them_only_and_keeps_them_out(source):
    tenant = source.tenant
    u1 = set(Episode.objects.filter(tenant=tenant, user_id="u1").values_list("pk", flat=True))
    u2 = list(
        Episode.objects.filter(tenant=tenant, user_id="u2").order_by("pk").values("pk", "version", "layer")
    )
    assert u1 and u2
    first = source.post("/api/v1/forget", {"user_id": "u1", "erase": True})
    assert first.status_code == 200, first.json()
    assert first.json()["will_erase"]["episodes"] == len(u1)
    assert Episode.objects.filter(pk__in=u1).count() == len(u1)

    second = source.post(
        "/api/v1/forget", {"user_id": "u1", "erase": True, "confirm": first.json()["confirm"]}
    )
    assert second.status_code == 200, second.json()
    assert second.json()["verification"]["clean"] is True
    assert not Episode.objects.filter(pk__in=u1).exists()
    assert not Turn.objects.filter(tenant=tenant, user_id="u1").exists()
    assert not JournalEntry.objects.filter(episode_id_value__in=u1).exists()
    store = hot_store()
    assert not (store.episode_ids(tenant.pk.hex) & u1)
    assert (
        list(
            Episode.objects.filter(tenant=tenant, user_id="u2")
            .order_by("pk")
            .values("pk", "version", "layer")
        )
        == u2
    )
    # a retried write cannot bring u1 back; u2 writes on
    again = source.post(
        "/api/v1/turns", {"user_id": "u1", "session_id": "s9", "turns": [{"role": "user", "text": "hi"}]}
    )
    assert again.status_code == 410, again.json()
    assert source.post("/api/v1/memories", {"text": "x", "user_id": "u1"}).status_code == 410
    assert source.post("/api/v1/memories", {"text": "y", "user_id": "u2"}).status_code == 201
    assert ForgottenUser.objects.filter(tenant=tenant).count() == 1
    assert "u1" not in json.dumps(list(ForgottenUser.objects.values()), default=str)


def test_an_operator_lifts_a_tombstone_and_it_is_audited(source, admin_client):
    confirm = source.post("/api/v1/forget", {"user_id": "u1", "erase": True}).json()["confirm"]
    assert (
        source.post("/api/v1/forget", {"user_id": "u1", "erase": True, "confirm": confirm}).status_code == 200
    )
    tombstone = ForgottenUser.objects.get(tenant=source.tenant)
    response = admin_client.post(
        "/admin/episodes/forgottenuser/",
        {"action": "delete_selected", "_selected_action": [tombstone.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert not ForgottenUser.objects.filter(tenant=source.tenant).exists()
    event = AuditEvent.objects.get(tenant=source.tenant, action="forget_user_lifted")
    assert event.actor.startswith("admin:") and event.detail == {"user_hash": tombstone.user_hash}
    assert source.post("/api/v1/memories", {"text": "back again", "user_id": "u1"}).status_code == 201


def test_forget_user_erase_needs_admin_and_only_a_user(source, caller):
    assert caller.post("/api/v1/forget", {"user_id": "u1", "erase": True}).status_code == 403
    response = source.post("/api/v1/forget", {"user_id": "u1", "kind": "fact", "erase": True})
    assert response.status_code == 400
    assert source.post("/api/v1/forget", {"erase": True}).status_code == 400


def test_erasure_is_refused_whole_when_redis_is_down(source, monkeypatch):
    from redis.exceptions import ConnectionError as RedisConnectionError

    first = source.delete("/api/v1/tenant-data").json()["confirm"]
    before = rows(source.tenant)

    def down(*args, **kwargs):
        raise RedisConnectionError("Connection refused")

    monkeypatch.setattr(type(hot_store()), "drop_tenant", down)
    response = source.delete("/api/v1/tenant-data", {"confirm": first})
    assert response.status_code == 503, response.json()
    assert rows(source.tenant) == before
    assert TickRun.objects.filter(tenant=source.tenant).exists()
