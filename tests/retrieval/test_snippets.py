"""What a hit shows by default: the turns chosen for the question across the answer's hits within
`max_tokens` (retrieval.evidence), with the episode's turn count and a handle that reads it whole;
`depth=deep` shows every turn. By default (`view=compact`) a hit is its chosen turns as text;
`view=full` shows every field."""

import pytest

from episodes.models import Episode
from retrieval.evidence import TURN_OVERHEAD_TOKENS, estimate_tokens

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


def cost(*texts):
    return sum(estimate_tokens(t) + TURN_OVERHEAD_TOKENS for t in texts)


def test_a_small_budget_shows_the_best_matched_turn_and_the_next_tokens_its_neighbours(caller, long_episode):
    episode_id, ids = long_episode
    hit = hit_of(caller, episode_id, "brother moving to Porto", max_tokens=cost(TEXTS[2]))
    assert hit["snippet"] is True and hit["turn_count"] == 10
    assert [t["id"] for t in hit["turns"]] == [ids[2]] and hit["matched_turn_ids"][0] == ids[2]
    wider = hit_of(caller, episode_id, "brother moving to Porto", max_tokens=cost(*TEXTS[1:4]))
    assert [t["id"] for t in wider["turns"]] == ids[1:4]
    whole = caller.get(hit["expand"]).json()
    assert [t["id"] for t in whole["turns"]] == ids


def test_the_budget_is_the_callers_to_choose_and_kept(caller, long_episode):
    episode_id, ids = long_episode
    for budget in (0, 20, 60, 120):
        hit = hit_of(caller, episode_id, "brother moving to Porto", max_tokens=budget)
        assert cost(*(t["text"] for t in hit.get("turns", []))) <= budget
    roomy = hit_of(caller, episode_id, "brother moving to Porto", max_tokens=5000)
    assert ids[2] in [t["id"] for t in roomy["turns"]] and len(roomy["turns"]) > 3
    deep = hit_of(caller, episode_id, "brother moving to Porto", depth="deep")
    assert [t["id"] for t in deep["turns"]] == ids and deep["turn_ids"] == ids and "snippet" not in deep
    for bad in (
        {"max_tokens": -1},
        {"max_tokens": 100_001},
        {"snippet_neighbours": -1},
        {"snippet_turns": 2},
    ):
        assert caller.post("/api/v1/search", {"query": "Porto", **bad}).status_code == 400


def test_a_matched_question_brings_its_reply(caller):
    texts = [
        "the garden is full of weeds again",
        "what did the vet say about the puppy's cough?",
        "nothing serious, a mild kennel infection and some syrup",
        "we also talked about the roof",
    ]
    episode_id = turns(caller, "vet", texts)["episode_ids"][0]
    hit = hit_of(caller, episode_id, "what did the vet say about the puppy", max_tokens=cost(*texts[1:3]))
    assert [t["text"] for t in hit["turns"]] == texts[1:3]


def test_a_packed_hit_shows_its_chosen_turns_beside_its_shape(caller, long_episode):
    episode_id, ids = long_episode
    pack(episode_id, "cold")
    hit = hit_of(caller, episode_id, "brother moving to Porto", max_tokens=cost(TEXTS[2]) + 40)
    assert hit["layer"] == "cold" and hit["index_only"] is True and "headline" in hit
    assert hit["snippet"] is True and TEXTS[2] in [t["text"] for t in hit["turns"]]
    assert "expand" not in hit and hit["unpack"].endswith("/unpack")
    # With room, the turns around the matched one come out of the database too.
    roomy = hit_of(caller, episode_id, "brother moving to Porto", max_tokens=2000)
    assert {TEXTS[1], TEXTS[2], TEXTS[3]} <= {t["text"] for t in roomy["turns"]}


def test_context_shows_the_chosen_turns_of_a_relevant_memory(caller, long_episode):
    body = caller.post("/api/v1/context", {"query": "brother moving to Porto", "max_tokens": 60})
    assert body.status_code == 200, body.json()
    text = body.json()["text"]
    assert TEXTS[2] in text and TEXTS[8] not in text and body.json()["tokens"] <= 60
    # With room, the whole (short) episode.
    roomy = caller.post("/api/v1/context", {"query": "brother moving to Porto", "max_tokens": 2000}).json()
    assert all(t in roomy["text"] for t in TEXTS)


def test_an_outsider_cannot_expand_a_snippet(caller, outsider, long_episode):
    episode_id, _ = long_episode
    hit = hit_of(caller, episode_id, "brother moving to Porto")
    assert outsider.get(hit["expand"]).status_code == 404


def test_a_compact_hit_is_its_snippet_as_text(caller, long_episode):
    """The default view: the hit's id, layer, score (three significant digits) and date, and its
    snippet as `role: text` lines, with a `…` line where turns are left out; the turn count is in
    the full view."""
    episode_id, _ = long_episode
    response = caller.post(
        "/api/v1/search", {"query": "brother moving to Porto", "max_tokens": cost(*TEXTS[1:4])}
    )
    hit = next(h for h in response.json()["results"] if h["episode_id"] == episode_id)
    assert set(hit) == {"episode_id", "layer", "score", "date", "text"}
    assert hit["date"] == "2026-05-01" and hit["score"] == float(f"{hit['score']:.3g}") > 0
    assert hit["text"] == "\n".join(
        ["…", f"assistant: {TEXTS[1]}", f"user: {TEXTS[2]}", f"assistant: {TEXTS[3]}", "…"]
    )
    whole = caller.get(f"/api/v1/memories/{episode_id}").json()
    assert [t["text"] for t in whole["turns"]] == TEXTS
    assert caller.post("/api/v1/search", {"query": "Porto", "view": "brief"}).status_code == 400


def test_a_compact_packed_hit_is_its_key_points_and_chosen_turns(caller, long_episode):
    episode_id, _ = long_episode
    pack(episode_id, "warm")
    key_points = "; ".join(Episode.objects.across_tenants("test").get(public_id=episode_id).key_points)

    def text(budget):
        response = caller.post("/api/v1/search", {"query": "brother moving to Porto", "max_tokens": budget})
        hit = next(h for h in response.json()["results"] if h["episode_id"] == episode_id)
        assert hit["layer"] == "warm"
        return hit["text"]

    # The turns first; the key points frame them when tokens remain.
    assert text(cost(TEXTS[2])) == "\n".join(["…", f"user: {TEXTS[2]}", "…"])
    roomy = text(2000)
    assert roomy.startswith(key_points + "\n") and f"user: {TEXTS[2]}" in roomy


def test_turns_are_chosen_across_hits_by_their_own_relevance(caller):
    """Three episodes each with one turn about the comet: a budget for three turns shows each
    episode's comet turn, not the first hit's neighbours."""
    ids = [
        turns(
            caller,
            f"s{n}",
            [f"filler {n} one", f"filler {n} two", f"the comet {n} was bright", f"filler {n} three"],
        )["episode_ids"][0]
        for n in range(3)
    ]
    query = {
        "query": "the comet was bright",
        "view": "full",
        "max_tokens": 3 * cost("the comet 0 was bright"),
    }
    hits = caller.post("/api/v1/search", query).json()["results"]
    assert {h["episode_id"] for h in hits} == set(ids)
    assert all(len(h["turns"]) == 1 and "comet" in h["turns"][0]["text"] for h in hits)


@pytest.mark.parametrize("layer", ["warm", "cold"])
def test_a_packed_hit_that_shows_all_its_turns_is_no_snippet(caller, layer):
    """A one-turn memory packed, found through its turn: the answer shows that turn, and says no
    turn is left out (it said so once, beside the turn it showed)."""
    episode_id = turns(caller, "s1", ["my brother is moving to Porto next spring"])["episode_ids"][0]
    pack(episode_id, layer)
    hit = hit_of(caller, episode_id, "brother moving to Porto")
    assert hit["layer"] == layer and hit["turn_count"] == 1
    assert [t["text"] for t in hit["turns"]] == ["my brother is moving to Porto next spring"]
    assert hit["snippet"] is False
