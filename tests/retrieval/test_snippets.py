"""Snippets by default (issue 16, item 3): a hit shows the turns around its best matches, with the
episode's turn count and a handle that reads it whole; `depth=deep` shows every turn. By default
(`view=compact`) a hit is its snippet as text; `view=full` shows every field."""

import pytest

from episodes.models import Episode

from .test_search import pack, turns

pytestmark = pytest.mark.django_db(transaction=True)

TEXTS = [
    "we talked about the weather for a while",
    "then about the football results",
    "my brother is moving to Porto next spring",
    "he found a flat near the old tram line",
    "the kitchen needs a new oven though",
    "we should visit him in April",
    "anyway, the garden is full of weeds",
    "I need to buy a new hose",
    "and fix the fence by the gate",
    "that is all for today",
]


@pytest.fixture
def long_episode(caller):
    body = turns(caller, "s1", TEXTS)
    assert len(body["episode_ids"]) == 1
    return body["episode_ids"][0], [t["id"] for t in body["turns"]]


def hit_of(caller, episode_id, query, **extra):
    response = caller.post("/api/v1/search", {"query": query, "view": "full", **extra})
    assert response.status_code == 200, response.json()
    return next(h for h in response.json()["results"] if h["episode_id"] == episode_id)


def test_a_hot_hit_shows_its_best_matched_turns_with_a_neighbour_each_side(caller, long_episode):
    episode_id, ids = long_episode
    hit = hit_of(caller, episode_id, "brother moving to Porto", snippet_turns=1)
    assert hit["snippet"] is True and hit["turn_count"] == 10
    assert hit["matched_turn_ids"] == [ids[2]]
    assert [t["id"] for t in hit["turns"]] == ids[1:4]
    whole = caller.get(hit["expand"]).json()
    assert [t["id"] for t in whole["turns"]] == ids


def test_snippet_size_is_the_callers_to_choose(caller, long_episode):
    episode_id, ids = long_episode
    alone = hit_of(caller, episode_id, "brother moving to Porto", snippet_turns=1, snippet_neighbours=0)
    assert [t["id"] for t in alone["turns"]] == [ids[2]]
    wide = hit_of(caller, episode_id, "brother moving to Porto", snippet_turns=1, snippet_neighbours=3)
    assert [t["id"] for t in wide["turns"]] == ids[0:6]
    deep = hit_of(caller, episode_id, "brother moving to Porto", depth="deep")
    assert [t["id"] for t in deep["turns"]] == ids and deep["turn_ids"] == ids and "snippet" not in deep
    for bad in ({"snippet_turns": 0}, {"snippet_neighbours": -1}, {"snippet_neighbours": 11}):
        assert caller.post("/api/v1/search", {"query": "Porto", **bad}).status_code == 400


def test_a_packed_hit_shows_its_matched_turns_beside_its_shape(caller, long_episode):
    episode_id, ids = long_episode
    pack(episode_id, "cold")
    hit = hit_of(caller, episode_id, "brother moving to Porto", snippet_turns=1)
    assert hit["layer"] == "cold" and hit["index_only"] is True and "headline" in hit
    assert hit["snippet"] is True and [t["text"] for t in hit["turns"]] == [TEXTS[2]]
    assert "expand" not in hit and hit["unpack"].endswith("/unpack")


def test_context_shows_the_snippet_of_a_relevant_memory(caller, long_episode):
    body = caller.post("/api/v1/context", {"query": "brother moving to Porto", "max_tokens": 2000})
    assert body.status_code == 200, body.json()
    text = body.json()["text"]
    assert TEXTS[2] in text and TEXTS[8] not in text


def test_an_outsider_cannot_expand_a_snippet(caller, outsider, long_episode):
    episode_id, _ = long_episode
    hit = hit_of(caller, episode_id, "brother moving to Porto")
    assert outsider.get(hit["expand"]).status_code == 404


def test_a_compact_hit_is_its_snippet_as_text(caller, long_episode):
    """The default view: the hit's id, layer, score, date and turn count, and its snippet as
    `role: text` lines, with a `…` line where turns are left out."""
    episode_id, _ = long_episode
    response = caller.post("/api/v1/search", {"query": "brother moving to Porto", "snippet_turns": 1})
    hit = next(h for h in response.json()["results"] if h["episode_id"] == episode_id)
    assert set(hit) == {"episode_id", "layer", "score", "date", "turn_count", "text"}
    assert hit["date"] == "2026-05-01" and hit["turn_count"] == 10
    assert hit["text"] == "\n".join(
        ["…", f"assistant: {TEXTS[1]}", f"user: {TEXTS[2]}", f"assistant: {TEXTS[3]}", "…"]
    )
    whole = caller.get(f"/api/v1/memories/{episode_id}").json()
    assert [t["text"] for t in whole["turns"]] == TEXTS
    assert caller.post("/api/v1/search", {"query": "Porto", "view": "brief"}).status_code == 400


def test_a_compact_packed_hit_is_its_key_points_and_matched_turns(caller, long_episode):
    episode_id, _ = long_episode
    pack(episode_id, "warm")
    response = caller.post("/api/v1/search", {"query": "brother moving to Porto", "snippet_turns": 1})
    hit = next(h for h in response.json()["results"] if h["episode_id"] == episode_id)
    key_points = Episode.objects.get(public_id=episode_id).key_points
    assert hit["layer"] == "warm" and hit["text"] == "\n".join(["; ".join(key_points), f"user: {TEXTS[2]}"])


def test_only_the_first_hits_show_neighbours(caller):
    ids = [
        turns(
            caller,
            f"s{n}",
            [
                f"filler {n} one",
                f"filler {n} two",
                f"the comet {n} was bright",
                f"filler {n} three",
                f"filler {n} four",
            ],
        )["episode_ids"][0]
        for n in range(3)
    ]
    query = {"query": "the comet was bright", "snippet_turns": 1, "view": "full"}
    hits = caller.post("/api/v1/search", {**query, "snippet_neighbour_hits": 1}).json()["results"]
    assert {h["episode_id"] for h in hits} == set(ids)
    assert [len(h["turns"]) for h in hits] == [3, 1, 1]
    hits = caller.post("/api/v1/search", {**query, "snippet_neighbour_hits": 3}).json()["results"]
    assert [len(h["turns"]) for h in hits] == [3, 3, 3]
    assert caller.post("/api/v1/search", {**query, "snippet_neighbour_hits": -1}).status_code == 400
