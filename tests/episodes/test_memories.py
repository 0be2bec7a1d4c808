from datetime import timedelta

import pytest
from django.utils import timezone

from episodes import curation, services
from episodes.models import Episode, Link
from episodes.stores.hot import hot_store
from tests.conftest import pk, unit_vectors

pytestmark = pytest.mark.django_db(transaction=True)


def _memory(caller, text="Alice prefers green tea", **extra):
    response = caller.post("/api/v1/memories", {"text": text, **extra})
    assert response.status_code == 201, response.json()
    return response.json()


def test_memory_is_written_read_and_listed(caller):
    body = _memory(caller, kind="preference", tags=["drinks"], anchor=True, user_id="alice")
    assert body["layer"] == "hot" and body["anchor"] is True and body["kind"] == "preference"
    assert body["turns"][0]["text"] == "Alice prefers green tea"
    assert hot_store().episode_ids(caller.tenant.id.hex) == {pk(body["id"])}
    listed = caller.get("/api/v1/memories", {"kind": "preference", "anchor": "true"}).json()["results"]
    assert [m["id"] for m in listed] == [body["id"]]
    assert caller.get("/api/v1/memories", {"kind": "fact"}).json()["results"] == []


def test_list_pages_with_a_cursor(caller):
    ids = [_memory(caller, text=f"fact number {i}")["id"] for i in range(5)]
    first = caller.get("/api/v1/memories", {"limit": 2}).json()
    second = caller.get("/api/v1/memories", {"limit": 2, "cursor": first["next_cursor"]}).json()
    third = caller.get("/api/v1/memories", {"limit": 2, "cursor": second["next_cursor"]}).json()
    seen = [m["id"] for m in first["results"] + second["results"] + third["results"]]
    assert seen == ids[::-1]  # newest first
    assert third["next_cursor"] is None
    assert caller.get("/api/v1/memories", {"cursor": "garbage"}).status_code == 400


def test_forget_hides_everywhere_and_restore_brings_back(caller):
    body = _memory(caller)
    episode_id = body["id"]
    assert caller.delete(f"/api/v1/memories/{episode_id}").status_code == 200
    assert caller.get(f"/api/v1/memories/{episode_id}").status_code == 404
    assert caller.get("/api/v1/memories").json()["results"] == []
    assert hot_store().episode_ids(caller.tenant.id.hex) == set()
    assert (
        Episode.objects.across_tenants("test").filter(public_id=episode_id).exists()
    )  # kept for the grace period
    forgotten = caller.get("/api/v1/memories", {"state": "forgotten"}).json()["results"]
    assert [m["id"] for m in forgotten] == [episode_id]

    assert caller.post(f"/api/v1/memories/{episode_id}/restore").status_code == 200
    assert caller.get(f"/api/v1/memories/{episode_id}").status_code == 200
    assert hot_store().episode_ids(caller.tenant.id.hex) == {pk(episode_id)}
    assert caller.post(f"/api/v1/memories/{episode_id}/restore").status_code == 409


def test_restore_after_the_grace_period_is_refused(caller):
    episode_id = pk(_memory(caller)["id"])
    now = timezone.now()
    curation.episode_forget(tenant=caller.tenant, episode_id=episode_id, now=now - timedelta(days=31))
    with pytest.raises(services.ConflictError):
        curation.episode_restore(tenant=caller.tenant, episode_id=episode_id, now=now, grace_days=30)


def test_links_and_anchor(caller):
    a = _memory(caller, text="project Apollo kickoff")["id"]
    b = _memory(caller, text="Apollo budget approved")["id"]
    response = caller.post(f"/api/v1/memories/{a}/links", {"target_id": b, "kind": "references"})
    assert response.status_code == 201
    assert (
        caller.post(f"/api/v1/memories/{a}/links", {"target_id": b, "kind": "references"}).status_code == 200
    )
    detail = caller.get(f"/api/v1/memories/{b}").json()
    assert detail["counters"]["in_degree"] == 1
    assert detail["links"]["in"] == [{"episode_id": a, "kind": "references"}]
    assert caller.delete(f"/api/v1/memories/{a}/links", {"target_id": b}).status_code == 200
    assert not Link.objects.across_tenants("test").filter(src_id=pk(a)).exists()

    assert caller.post(f"/api/v1/memories/{a}/anchor").json()["anchor"] is True
    assert caller.delete(f"/api/v1/memories/{a}/anchor").json()["anchor"] is False


def test_pinning_a_cold_episode_brings_it_back_to_hot(caller):
    episode_id = _memory(caller)["id"]
    Episode.objects.across_tenants("test").filter(public_id=episode_id).update(layer="cold")
    hot_store().remove_episode(caller.tenant.id.hex, pk(episode_id), [])
    body = caller.post(f"/api/v1/memories/{episode_id}/anchor").json()
    assert body["layer"] == "hot"
    assert pk(episode_id) in hot_store().episode_ids(caller.tenant.id.hex)


def test_provided_vectors_are_stored_normalised(provided):
    vector = (unit_vectors(1, seed=9)[0] * 7).tolist()
    body = _memory(provided, vector=vector)
    stored = Episode.objects.across_tenants("test").get(public_id=body["id"]).embedding
    assert abs(sum(v * v for v in stored) - 1.0) < 1e-4
