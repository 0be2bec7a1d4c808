"""One ranking over every tier (docs/decisions/0017): an episode that moved to warm or cold ranks
where it would have ranked hot, not level with the best of whatever stayed hot."""

from dataclasses import dataclass

import numpy as np
import pytest

from episodes.stores.archive import ArchiveHit, rescored
from episodes.stores.hot_replies import HotHit
from memory_platform.embeddings import get_embedder
from retrieval.ranking import MIN_SHARE, interleaved

from ..conftest import pk, turn_pk
from .test_search import pack, turns

DOGS = [
    "my sister adopted a greyhound named comet",
    "our neighbour's beagle barks at every dog walker",
    "the puppy training class taught the spaniel to sit",
    "we walked the old labrador along the river every morning",
]
OTHERS = [
    "the sourdough recipe needs a long cold proof",
    "quarterly tax forms are due before the end of april",
    "the train to the airport was cancelled again",
]


@dataclass
class Packed:
    episode_id: int
    turn_id: int | None
    score: float


def hot(turn_id: int, score: float) -> HotHit:
    return HotHit(doc_id=f"d{turn_id}", episode_id=turn_id, turn_id=turn_id, score=score)


def test_vector_lists_of_two_tiers_are_ranked_again_for_one_query_vector():
    # Each tier found its candidates with its own query vector; they are compared with one.
    query = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    hot_hits = [vec_hit(HotHit(doc_id="d1", episode_id=1, turn_id=1, score=0.99), [0.6, 0.8, 0.0])]
    packed = [
        ArchiveHit(2, 3, 0.0, np.array([0.9, 0.1, 0.0], dtype=np.float32)),
        ArchiveHit(4, None, 0.0, None),
    ]
    ranked = rescored([*hot_hits, *packed], query, 5)
    assert [(m.episode_id, round(m.score, 3)) for m in ranked] == [(2, 0.994), (1, 0.6)]


def vec_hit(hit, vector):
    hit.vector = np.asarray(vector, dtype=np.float32)
    return hit


def test_text_lists_interleave_by_the_share_of_the_tenant_each_tier_holds():
    hot_list = [hot(1, 9.0), hot(2, 8.0), hot(3, 7.0)]
    packed = [Packed(10, 11, 0.1), Packed(12, 13, 0.09), Packed(14, 15, 0.08)]
    # One tier in four hot: its r-th match stands at r / √0.25 = 2r, the packed tier's at r / √0.75
    # (1.15, 2.31, 3.46): the small tier's best match is not pushed below the big one's fourth.
    merged = interleaved([(hot_list, 0.25), (packed, 0.75)])
    assert [m.turn_id for m in merged][:5] == [11, 1, 13, 15, 2]
    # Equal shares alternate, the first list first on ties.
    assert [m.turn_id for m in interleaved([(hot_list, 0.5), (packed, 0.5)])][:4] == [1, 11, 2, 13]
    # A tier holding nothing counted (hot episodes not indexed yet) still places its matches.
    assert [m.turn_id for m in interleaved([(hot_list, 1.0), (packed[:1], 0.0)])] == [1, 2, 3, 11]
    assert MIN_SHARE > 0


@pytest.mark.django_db(transaction=True)
def test_packed_episodes_rank_above_weaker_hot_ones(caller):
    # Before one ranking, each tier's best match scored alike: an unrelated hot episode ranked
    # level with the best packed one, above every other relevant packed episode.
    dogs = [pk(turns(caller, f"d{i}", [text, "ok"])["episode_ids"][0]) for i, text in enumerate(DOGS)]
    others = [pk(turns(caller, f"o{i}", [text, "ok"])["episode_ids"][0]) for i, text in enumerate(OTHERS)]
    for episode_id in dogs:
        pack(episode_id, "warm")
    vector = get_embedder("local").embed_one("a dog").tolist()
    found = caller.post("/api/v1/search", {"query": "", "vector": vector, "limit": 7, "explain": True}).json()
    ranked = [pk(hit["episode_id"]) for hit in found["results"]]
    assert set(ranked[:4]) == set(dogs), [hit["explain"] for hit in found["results"]]
    assert set(ranked[4:]) == set(others)


@pytest.mark.django_db(transaction=True)
def test_an_episode_ranks_as_it_did_hot_after_it_is_packed(caller):
    ids = [pk(turns(caller, f"d{i}", [text, "ok"])["episode_ids"][0]) for i, text in enumerate(DOGS + OTHERS)]
    vector = get_embedder("local").embed_one("a dog").tolist()

    def ranking():
        body = {"query": "which dog did my sister adopt", "vector": vector, "limit": 7}
        return [pk(hit["episode_id"]) for hit in caller.post("/api/v1/search", body).json()["results"]]

    all_hot = ranking()
    assert all_hot[0] == ids[0]
    for episode_id in ids[1:4]:
        pack(episode_id, "cold")  # the other dogs age; the answer and the unrelated stay hot
    pack(ids[0], "warm")
    assert ranking()[0] == ids[0]


@pytest.mark.django_db(transaction=True)
def test_an_outsiders_packed_episodes_never_enter_the_ranking(caller, outsider):
    mine = pk(turns(caller, "s1", ["the spaniel learned to sit", "ok"])["episode_ids"][0])
    theirs = pk(turns(outsider, "s1", ["my sister adopted a greyhound named comet", "ok"])["episode_ids"][0])
    pack(mine, "warm")
    pack(theirs, "warm")
    vector = get_embedder("local").embed_one("greyhound named comet").tolist()
    found = caller.post("/api/v1/search", {"query": "greyhound comet", "vector": vector}).json()["results"]
    assert [pk(hit["episode_id"]) for hit in found] == [mine]


WINDOW = [
    "did you go to the lecture yesterday",
    "yes, the quantum tunnelling part was wild",
    "I bought a new kettle on the way home",
]


def window_matches(tenant, words):
    """Packed turns whose window (the turn with its neighbours) holds every word."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM episodes_turn WHERE tenant_id = %s AND packed "
            "AND window_vector @@ plainto_tsquery('english', %s)",
            [tenant.pk, words],
        )
        return {row[0] for row in cursor.fetchall()}


@pytest.mark.django_db(transaction=True)
def test_a_packed_turn_is_found_by_the_words_of_its_window_as_its_hot_document_was(caller):
    from django.utils import timezone

    from episodes.models import Episode, Turn
    from episodes.scope import Scope
    from episodes.stores.archive import text_search

    body = turns(caller, "s1", WINDOW)
    episode_id = pk(body["episode_ids"][0])
    ids = [turn_pk(t["id"]) for t in body["turns"]]
    words = "quantum tunnelling lecture"
    assert window_matches(caller.tenant, words) == set()  # hot turns: Redis searches their windows

    pack(episode_id, "warm")
    # Neither turn holds every word; each window does (the kettle's window lacks the lecture).
    assert window_matches(caller.tenant, words) == {ids[0], ids[1]}
    found = text_search(caller.tenant, text=words, scope=Scope(layers=("warm",)), k=10)
    assert found[0].turn_id in {ids[0], ids[1]}

    # A turn written into a packed episode rewrites its neighbours' windows.
    later = Turn.objects.create(
        tenant=caller.tenant,
        episode_id=episode_id,
        seq=3,
        role="user",
        text="the next lecture is in the same hall",
        occurred_at=timezone.now(),
    )
    assert window_matches(caller.tenant, "kettle next lecture") == {ids[2], later.pk}

    Episode.objects.across_tenants("test").filter(pk=episode_id).update(
        layer="hot"
    )  # unpacked: Redis searches it again
    assert window_matches(caller.tenant, words) == set()


@pytest.mark.django_db(transaction=True)
def test_the_tiers_shares_follow_a_move_once_the_cached_counts_expire(caller, monkeypatch):
    # A tick moving a tenant's history out of hot changes the split at once; the cached split
    # (seconds, not a minute: archive.PACKED_COUNT_TTL) follows when it expires.
    from episodes.stores import archive

    assert archive.PACKED_COUNT_TTL <= 10
    monkeypatch.setattr(archive, "_packed_count_cache", {})
    ids = [turns(caller, f"s{i}", [f"note {i}", "ok"])["episode_ids"][0] for i in range(3)]
    tenant = caller.tenant
    assert archive.turn_counts(tenant) == (6, 0)
    pack(ids[0], "warm")
    assert archive.turn_counts(tenant) == (6, 0)  # cached
    monkeypatch.setattr(archive, "PACKED_COUNT_TTL", 0.0)
    assert archive.turn_counts(tenant) == (6, 2)
