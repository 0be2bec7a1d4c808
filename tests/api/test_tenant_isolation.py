"""An outsider tenant must see and touch nothing of ours, by any endpoint."""

import pytest
from django.utils import timezone

from episodes.models import Episode, Link
from episodes.scope import Scope
from episodes.stores.hot import hot_store
from tests.conftest import pk, turn_pk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_deployment")]


@pytest.fixture
def ours(caller):
    a = caller.post("/api/v1/memories", {"text": "our secret launch date is 9 June"}).json()["id"]
    body = caller.post(
        "/api/v1/turns", {"session_id": "s1", "turns": [{"role": "user", "text": "the launch is secret"}]}
    ).json()
    return a, body["episode_ids"][0]


def test_outsider_lists_nothing(ours, outsider):
    assert outsider.get("/api/v1/memories").json()["results"] == []
    assert outsider.get("/api/v1/memories", {"session_id": "s1"}).json()["results"] == []
    assert outsider.get("/api/v1/memories", {"state": "forgotten"}).json()["results"] == []


@pytest.mark.parametrize(
    ("method", "suffix", "data"),
    [
        ("get", "", None),
        ("get", "?depth=deep", None),
        ("delete", "", None),
        ("post", "/restore", None),
        ("post", "/anchor", None),
        ("delete", "/anchor", None),
        ("post", "/links", "self-target"),
        ("delete", "/links", "self-target"),
    ],
)
@pytest.mark.parametrize("form", ["public", "legacy"])
def test_outsider_gets_404_on_our_ids(ours, outsider, caller, method, suffix, data, form):
    a, b = ours if form == "public" else (pk(ours[0]), pk(ours[1]))
    before = list(
        Episode.objects.across_tenants("test").order_by("pk").values_list("pk", "state", "anchor", "version")
    )
    payload = None
    if data == "self-target":
        own = outsider.post("/api/v1/memories", {"text": "outsider note"}).json()["id"]
        payload = {"target_id": b}
        # our id as the source
        response = getattr(outsider, method)(f"/api/v1/memories/{a}{suffix}", payload)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
        # our id as the target of the outsider's own memory
        response = getattr(outsider, method)(f"/api/v1/memories/{own}{suffix}", {"target_id": a})
        assert response.status_code == 404
        assert not Link.objects.across_tenants("test").filter(dst_id=pk(ours[0])).exists()
        return
    path = f"/api/v1/memories/{a}{suffix}"
    response = (
        getattr(outsider, method)(path) if payload is None else getattr(outsider, method)(path, payload)
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    after = list(
        Episode.objects.across_tenants("test").order_by("pk").values_list("pk", "state", "anchor", "version")
    )
    assert after == before


def test_outsider_finds_nothing_in_the_hot_store(ours, outsider):
    a = pk(ours[0])
    vector = Episode.objects.across_tenants("test").get(pk=a).embedding
    store = hot_store()
    vector_hits, text_hits, _ = store.search(
        outsider.tenant.id.hex,
        vector=vector,
        text="secret launch",
        scope=Scope(),
        k=10,
    )
    assert vector_hits == [] and text_hits == []
    assert store.episode_ids(outsider.tenant.id.hex) == set()
    # and the owner does find it, so the query itself works
    mine, _, _ = store.search(
        Episode.objects.across_tenants("test").get(pk=a).tenant.id.hex,
        vector=vector,
        text=None,
        scope=Scope(states=("active",)),
        k=10,
    )
    assert a in {h.episode_id for h in mine}


def test_by_id_reads_carry_the_tenant(caller, outsider):
    """Every read by id in the stores has the tenant in its WHERE: another tenant's ids read nothing."""
    import numpy as np

    from episodes.stores import rows

    body = caller.post(
        "/api/v1/turns", {"session_id": "s1", "turns": [{"role": "user", "text": "the ledger is blue"}]}
    ).json()
    episode_id = pk(body["episode_ids"][0])
    turn_id = turn_pk(body["turns"][0]["id"])

    ours = rows.turns_for(caller.tenant, [episode_id], full={episode_id})
    assert [t.pk for t in ours[episode_id]] == [turn_id] and ours[episode_id][0].text == "the ledger is blue"
    assert rows.turns_for(outsider.tenant, [episode_id], full={episode_id}) == {episode_id: []}
    assert rows.rank_rows(outsider.tenant, [episode_id]) == []
    (mine,) = rows.rank_rows(caller.tenant, [episode_id])
    hit = rows.hit_episode(mine)
    assert (hit.pk, hit.tenant_id, hit.state) == (episode_id, caller.tenant.pk, "active")
    vector = np.ones(384, dtype=np.float32)
    assert rows.turn_similarities(outsider.tenant, [episode_id], vector) == {}
    assert set(rows.turn_similarities(caller.tenant, [episode_id], vector)) == {episode_id}
    theirs = rows.turns_with_similarity(outsider.tenant, [episode_id], full={episode_id}, vector=vector)
    assert theirs == ({episode_id: []}, {})
    turns, similarity = rows.turns_with_similarity(
        caller.tenant, [episode_id], full={episode_id}, vector=vector
    )
    assert [t.pk for t in turns[episode_id]] == [turn_id] and set(similarity or {}) == {turn_id}
    expected = rows.turn_similarities(caller.tenant, [episode_id], vector)[episode_id][0][1]
    assert similarity is not None and similarity[turn_id] == pytest.approx(expected)
    uses = {(outsider.tenant.pk, episode_id): rows.Use(accesses=1, traversals=0, at=timezone.now())}
    assert rows.uses_add(uses) == 0  # the outsider's tenant id with our episode id matches no row


def test_internal_by_id_work_carries_the_tenant_too(caller, outsider):
    """Indexing and Redis sync take the tenant with the ids: another tenant's id does nothing."""
    from episodes.indexing import episodes_index_hot
    from episodes.tasks import index_episodes
    from lifecycle.hotsync import sync_episode

    episode_id = pk(caller.post("/api/v1/memories", {"text": "the ledger is blue"}).json()["id"])
    hot_store().remove_episode(caller.tenant.id.hex, episode_id, [])
    assert episodes_index_hot(outsider.tenant.pk, [episode_id]) == 0
    assert index_episodes([episode_id], tenant_id=str(outsider.tenant.pk)) == 0
    assert sync_episode(outsider.tenant.pk, episode_id)  # nothing of the outsider's to sync
    assert episode_id not in hot_store().episode_ids(caller.tenant.id.hex)
    assert hot_store().episode_ids(outsider.tenant.id.hex) == set()
    assert episodes_index_hot(caller.tenant.pk, [episode_id]) == 1
    assert episode_id in hot_store().episode_ids(caller.tenant.id.hex)
