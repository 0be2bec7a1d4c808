"""Hardening finding 1: one write key filled the shared Redis and every tenant lost search. A
tenant's hot tier is now bounded in bytes at ingest (lifecycle.quota), the queue lives in Postgres,
and a Redis that refuses writes is reported by ingest, search and /readyz."""

from __future__ import annotations

import pytest

from episodes.models import Episode, Layer
from episodes.stores.hot import hot_store
from lifecycle.models import JournalEntry, policy_row
from lifecycle.quota import hot_bytes
from memory_platform.redis_client import get_redis
from tests.conftest import Caller, pk, unit_vectors

pytestmark = pytest.mark.django_db(transaction=True)


def _turns(prefix: str, count: int, chars: int, vectors, session: str) -> list[dict]:
    filler = "lorem ipsum dolor sit amet " * (chars // 27 + 1)
    return [
        {
            "role": "user",
            "text": f"{prefix} {i} {filler}"[:chars],
            "session_id": session,
            "episode_boundary": True,
            "vector": vectors[i].tolist(),
        }
        for i in range(count)
    ]


def _set_quota(tenant, quota: int) -> None:
    policy = policy_row(tenant)
    policy.hot_quota_bytes = quota
    policy.save()


def test_ingest_sends_the_least_recently_used_hot_episodes_to_warm_and_never_another_tenants(db):
    filler = Caller("filler", embedder="provided")
    bystander = Caller("bystander", embedder="provided")
    _set_quota(filler.tenant, 40_000)  # about six turns of 5,000 characters and a vector
    vectors = unit_vectors(40, seed=11)
    assert (
        bystander.post("/api/v1/turns", {"turns": _turns("calm", 3, 5_000, vectors, "b")}).status_code == 201
    )
    anchor = filler.post(
        "/api/v1/memories", {"text": "the anchor stays hot", "anchor": True, "vector": vectors[39].tolist()}
    ).json()["id"]

    first_batch: list[str] = []
    for round_ in range(6):
        body = filler.post(
            "/api/v1/turns", {"turns": _turns(f"r{round_}", 3, 5_000, vectors[round_ * 3 :], f"s{round_}")}
        ).json()
        assert body["searchable"] is True, body
        first_batch = first_batch or body["episode_ids"]
        assert hot_bytes(filler.tenant) <= 40_000

    # The oldest went warm, journaled as the tick would, by the quota; the anchor stayed.
    assert set(
        Episode.objects.across_tenants("test")
        .filter(public_id__in=first_batch)
        .values_list("layer", flat=True)
    ) == {Layer.WARM}
    moved = JournalEntry.objects.across_tenants("test").filter(tenant=filler.tenant, action="hot_to_warm")
    assert moved.count() >= 3 and {e.after["reason"] for e in moved} == {"hot_quota"}
    assert Episode.objects.across_tenants("test").get(public_id=anchor).layer == Layer.HOT
    # Redis holds exactly what Postgres calls hot.
    hot = set(
        Episode.objects.across_tenants("test")
        .filter(tenant=filler.tenant, layer=Layer.HOT)
        .values_list("pk", flat=True)
    )
    assert hot_store().episode_ids(filler.tenant.id.hex) == hot
    # Packed, not lost: the first batch is still found.
    found = filler.post(
        "/api/v1/search", {"query": "r0 0 lorem", "vector": vectors[0].tolist(), "view": "full"}
    ).json()
    assert first_batch[0] in [hit["episode_id"] for hit in found["results"]]
    # The other tenant was never touched.
    assert (
        not Episode.objects.across_tenants("test")
        .filter(tenant=bystander.tenant)
        .exclude(layer=Layer.HOT)
        .exists()
    )
    assert not JournalEntry.objects.across_tenants("test").filter(tenant=bystander.tenant).exists()


def test_a_batch_larger_than_the_quota_ends_within_it(db):
    caller = Caller("bulk", embedder="provided")
    _set_quota(caller.tenant, 10_000)
    vectors = unit_vectors(5, seed=12)
    body = caller.post("/api/v1/turns", {"turns": _turns("big", 5, 5_000, vectors, "s")}).json()
    assert hot_bytes(caller.tenant) <= 10_000
    assert (
        Episode.objects.across_tenants("test")
        .filter(public_id__in=body["episode_ids"], layer=Layer.WARM)
        .count()
        >= 3
    )


def test_unpacking_makes_room_too(db):
    from django.utils import timezone

    from lifecycle.services import episode_pack

    caller = Caller("unpacker", embedder="provided")
    vectors = unit_vectors(6, seed=14)
    ids = caller.post("/api/v1/turns", {"turns": _turns("u", 6, 5_000, vectors, "s")}).json()["episode_ids"]
    for episode_id in ids[:3]:
        episode_pack(
            tenant=caller.tenant, episode_id=pk(episode_id), layer="warm", now=timezone.now(), actor="test"
        )
    _set_quota(caller.tenant, hot_bytes(caller.tenant))  # full: three hot episodes
    assert caller.post(f"/api/v1/memories/{ids[0]}/unpack").status_code == 200
    assert hot_bytes(caller.tenant) <= policy_row(caller.tenant).hot_quota_bytes
    assert (
        Episode.objects.across_tenants("test").get(public_id=ids[0]).layer == Layer.HOT
    )  # the one asked for stays
    assert Episode.objects.across_tenants("test").filter(public_id__in=ids[3:], layer=Layer.WARM).count() == 1


def test_the_tick_keeps_the_quota_in_bytes_too(db):
    from django.utils import timezone

    from lifecycle.services import tick_run

    caller = Caller("ticked", embedder="provided")
    vectors = unit_vectors(6, seed=13)
    caller.post("/api/v1/turns", {"turns": _turns("t", 6, 5_000, vectors, "s")})
    _set_quota(caller.tenant, 15_000)  # lowered after the writes: the tick applies it
    tick_run(tenant=caller.tenant, now=timezone.now())
    assert hot_bytes(caller.tenant) <= 15_000


def test_fill_drill_one_tenant_writes_on_and_the_others_keep_search(db):
    """The probe's attack, scaled to a test: Redis has room for 8 MB more; one tenant writes 6 MB
    of turns (about 15 MB in Redis without a quota) with its quota at 1 MB; the other tenant's writes
    stay searchable and its searches undegraded throughout, and the queue keeps taking tasks."""
    client = get_redis()
    bystander = Caller("bystander", embedder="provided")
    attacker = Caller("attacker", embedder="provided")
    calm = unit_vectors(40, seed=21)
    bystander.post("/api/v1/turns", {"turns": _turns("calm", 2, 200, calm, "b0")})
    _set_quota(attacker.tenant, 1_000_000)
    original = client.config_get("maxmemory")["maxmemory"]
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 8_000_000)
    try:
        vectors = unit_vectors(40, seed=22)
        for round_ in range(30):  # 30 x 40 x 5,000 characters = 6 MB of text alone
            body = attacker.post(
                "/api/v1/turns", {"turns": _turns(f"a{round_}", 40, 5_000, vectors, f"a{round_}")}
            ).json()
            assert body["searchable"] is True, body
            assert hot_bytes(attacker.tenant) <= 1_000_000
            if round_ % 5 == 4:
                i = round_ // 5 + 2
                mine = bystander.post(
                    "/api/v1/turns", {"turns": _turns(f"calm{i}", 1, 200, calm[i:], f"b{i}")}
                )
                assert mine.json()["searchable"] is True
                search = bystander.post(
                    "/api/v1/search", {"vector": calm[i].tolist(), "limit": 3, "view": "full"}
                ).json()
                assert search["degraded"] is False and search["stale"] is False
                assert search["results"][0]["title"].startswith(f"calm{i} 0")
                queued = bystander.post(
                    "/api/v1/turns", {"async": True, "turns": _turns(f"q{i}", 1, 200, calm[i + 10 :], "q")}
                ).json()
                assert queued["queued"] is True and _work_the_queue() == 1
        assert hot_store().count(bystander.tenant.id.hex) == 2 + 6 + 6  # all of its turns, all indexed
        assert client.info("memory")["used_memory"] < int(client.config_get("maxmemory")["maxmemory"])
        ready = bystander.client.get("/readyz").json()
        assert ready["status"] == "ok"
    finally:
        client.config_set("maxmemory", original)


def _work_the_queue() -> int:
    """What the worker does with each task in the queue (in Postgres): run it, acknowledge it."""
    from pydoc import locate

    from django_q.brokers import get_broker
    from django_q.signing import SignedPackage

    broker = get_broker()
    done = 0
    for task_id, payload in broker.dequeue() or []:
        task = SignedPackage.loads(payload)
        locate(task["func"])(*task["args"], **task["kwargs"])
        broker.acknowledge(task_id)
        done += 1
    return done


def test_redis_full_drill_ingest_search_and_readyz_say_so_and_the_repair_catches_up(db):
    """When Redis refuses writes anyway (full for a reason of its own), nothing is silent: ingest
    says why its turns are not searchable, search is degraded with a reason and still finds them
    (from Postgres), /readyz says degraded, the queue still takes tasks, and once Redis has room the
    repair indexes them."""
    from episodes.tasks import repair_hot_index

    client = get_redis()
    caller = Caller("victim", embedder="provided")
    vectors = unit_vectors(4, seed=31)
    caller.post("/api/v1/turns", {"turns": _turns("before", 1, 200, vectors, "s0")})
    original = client.config_get("maxmemory")["maxmemory"]
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 1_000_000)
    try:
        import redis

        with pytest.raises(redis.exceptions.ResponseError, match="maxmemory"):
            for i in range(5_000):
                client.set(f"junk:{i}", b"x" * 1_000)
        # Full for good: Redis's own use moves by some kilobytes (buffers, freed pages), which a
        # small write could slip into; over its limit it refuses every write that may grow it.
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 100_000)
        body = caller.post("/api/v1/turns", {"turns": _turns("during", 1, 200, vectors[1:], "s1")}).json()
        assert body["searchable"] is False and "full" in body["reason"], body
        found = caller.post(
            "/api/v1/search", {"vector": vectors[1].tolist(), "limit": 3, "view": "full"}
        ).json()
        assert found["degraded"] is True and "full" in found["degraded_reason"]
        assert found["results"][0]["title"].startswith("during 0")
        ready = caller.client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "degraded"
        assert ready.json()["checks"]["redis"]["writable"] is False
        queued = caller.post(
            "/api/v1/turns", {"async": True, "turns": _turns("q", 1, 200, vectors[2:], "s2")}
        )
        assert queued.json()["queued"] is True  # the queue is in Postgres: it keeps taking tasks
    finally:
        client.delete(*[f"junk:{i}" for i in range(5_000)])
        client.config_set("maxmemory", original)
    assert repair_hot_index() >= 1
    after = caller.post("/api/v1/search", {"vector": vectors[1].tolist(), "limit": 3, "view": "full"}).json()
    assert after["degraded"] is False and after["degraded_reason"] is None
    assert after["results"][0]["layer"] == "hot"


def test_readyz_shows_details_to_this_machine_and_the_token_only(db, client, settings):
    settings.METRICS_TOKEN = "probe-secret"
    outside = client.get("/readyz", REMOTE_ADDR="203.0.113.9")
    assert outside.status_code == 200 and outside.json() == {"status": "ok"}
    forwarded = client.get("/readyz", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert forwarded.json() == {"status": "ok"}
    wrong = client.get("/readyz", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.json() == {"status": "ok"}
    token = client.get("/readyz", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer probe-secret")
    assert token.json()["checks"]["postgres"]["ok"] is True
    assert "checks" in client.get("/readyz").json()  # loopback
