"""Full text counts every word of a query: a turn holding all of them outranks one holding fewer,
in the hot tier (RediSearch) and in warm and cold (Postgres), in English, Russian and Chinese
(docs/decisions/0041)."""

import pytest
from django.utils import timezone

from lifecycle.services import episode_pack
from retrieval.query import SearchQuery
from retrieval.services import search

from ..conftest import pk
from .test_search import turns

pytestmark = pytest.mark.django_db(transaction=True)

# (query, the episode whose first turn holds every word, episodes whose turns hold one of them),
# each episode as its turns. The one-word turns are shorter and written first: scored by one word
# each, as RediSearch 2.10 scores a union inside the search's filter, they came first (on their
# score or on a tie) in each case here; Postgres, whose all-words pass comes first, did not.
CASES = {
    "ru": (
        "новая шина",
        ["Нужно купить новые шины для машины до зимы", "ok"],
        [["Вчера мы ходили в театр на новую постановку", "ok"]],
    ),
    "en": (
        "new tyres",
        ["I need to buy new winter tyres for the car before December", "ok"],
        [["We watched a new film", "ok"], ["The old tyres are in the garage", "ok"]],
    ),
    "zh": (
        "酒店预订",
        ["我已经预订了去上海的机票和酒店，下周一出发"],
        [["这家酒店很好"], ["会议室已经预订好了"]],
    ),
}


def text_ranked(tenant, query):
    """The episodes the full-text lists alone rank for ``query``, best first."""
    found = search(
        tenant=tenant,
        query=SearchQuery(text=query, text_only=True, record_access=False),
        now=timezone.now(),
    )
    return [hit.episode.pk for hit in found.hits]


@pytest.mark.parametrize("layer", ["hot", "warm", "cold"])
@pytest.mark.parametrize("language", sorted(CASES))
def test_a_turn_with_every_word_of_the_query_comes_first(caller, outsider, language, layer):
    query, every, fewer = CASES[language]
    ids = [pk(turns(caller, f"s{i}", texts)["episode_ids"][0]) for i, texts in enumerate([*fewer, every])]
    turns(outsider, "theirs", every)
    if layer != "hot":
        for episode_id in ids:
            episode_pack(
                tenant=caller.tenant, episode_id=episode_id, layer=layer, now=timezone.now(), actor="test"
            )
    ranked = text_ranked(caller.tenant, query)
    assert ranked[0] == ids[-1], (ranked, ids)
    assert set(ranked) <= set(ids)
