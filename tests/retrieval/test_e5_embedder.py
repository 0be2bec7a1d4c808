"""The multilingual e5 embedder (docs/decisions/0043-multilingual-e5.md): queries and passages each
with their prefix, and a Russian question that shares no word with its answer found through the
vector list."""

import numpy as np
import pytest
from django.test import override_settings
from django.utils import timezone

from episodes.models import Turn
from lifecycle.models import policy_row
from memory_platform.embeddings import embedder_for, get_embedder
from memory_platform.embeddings.e5 import E5Embedder
from retrieval.query import SearchQuery
from retrieval.services import search

from ..conftest import Caller
from .test_search import turns

QUESTION = "Как зовут собаку Максима?"
# Not one word in common with the question, in any form.
ANSWER = "Корги, девочка, забираем из питомника в Твери в начале мая, назвали Бусинкой."
OTHERS = [
    "Хорошо. Я, кстати, с 3 по 21 июля в отпуске, за меня остаётся Денис.",
    "Вышли на 2,1 миллиона вместо 1,7, в основном из-за кухни.",
    "Ей нравится, записалась в кружок робототехники, ходит по вторникам и четвергам.",
    "Да, коллектив хороший, только добираться 40 минут на метро.",
    "Я поймал в основном окуней и одного леща на полтора кило.",
]


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    embedder = get_embedder("e5")  # one per process: the registry keeps it
    assert isinstance(embedder, E5Embedder)
    return embedder


def test_a_query_and_a_passage_each_have_their_prefix_and_are_unit_vectors_of_384(e5):
    engine = e5._load()
    query = e5.embed_one(QUESTION)
    passages = e5.embed([ANSWER, QUESTION])
    assert query.shape == (384,) and passages.shape == (2, 384)
    assert query.dtype == passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-5
    # The engine writes "query: " or "passage: " before the text: the same text is another vector
    # on each side, and the provider takes the query side for queries only.
    assert np.array_equal(query, engine.query(QUESTION))
    assert np.array_equal(passages, engine.passage([ANSWER, QUESTION]))
    assert float(query @ passages[1]) < 0.99
    assert e5.reading("ru") == e5.reading("zh") == e5.reading("en") == 1.0


def test_batches_of_any_size_embed_each_text_as_alone(e5):
    texts = [ANSWER, *OTHERS]
    whole = e5.embed(texts)
    with override_settings(MEMORY={"EMBED_BATCH_SIZE": 2}):
        assert np.array_equal(e5.embed(texts), whole)
    assert np.array_equal(e5.embed([OTHERS[0]])[0], whole[1])
    assert e5.embed([]).shape == (0, 384)


@pytest.mark.django_db(transaction=True)
def test_a_russian_question_finds_its_answer_with_no_shared_word_through_the_vectors(e5):
    russian = Caller("ru-co", embedder="e5")
    outsider = Caller("ru-outsider", embedder="e5")
    policy = policy_row(russian.tenant)
    policy.language = "ru"
    policy.save()
    assert embedder_for(russian.tenant) is e5
    for i, text in enumerate([*OTHERS, ANSWER]):
        turns(russian, f"s{i}", [text])
    turns(outsider, "s", [ANSWER])
    answer = Turn.objects.across_tenants("test").get(tenant=russian.tenant, text=ANSWER).pk
    own = set(Turn.objects.across_tenants("test").filter(tenant=russian.tenant).values_list("pk", flat=True))

    def ranked(*, text_only: bool) -> list[set[int]]:
        """The first three items of the ranking, each as the turns it covers."""
        result = search(
            tenant=russian.tenant,
            query=SearchQuery(text=QUESTION, limit=3, record_access=False, text_only=text_only),
            now=timezone.now(),
        )
        return [
            {key}
            if kind == "turn"
            else set(Turn.objects.across_tenants("test").filter(episode_id=key).values_list("pk", flat=True))
            for kind, key, _ in result.ranked_items()
        ]

    assert not any(answer in item for item in ranked(text_only=True))  # full text cannot reach it
    found = ranked(text_only=False)
    assert answer in found[0], found
    assert set().union(*found) <= own  # nothing of the outsider's copy
