"""Memory in Chinese, Russian and English (docs/decisions/0024): a turn's language, and full text that reads
each language in the hot index and in Postgres alike."""

import pytest
from django.utils import timezone

from episodes.language import (
    Language,
    detect,
    hot_text,
    index_text,
    language_of,
    query_terms,
    with_characters,
)
from episodes.models import Episode, Turn
from lifecycle.models import policy_row
from lifecycle.services import episode_pack
from retrieval.query import SearchQuery
from retrieval.services import search

from ..conftest import pk
from .test_search import turns

RUSSIAN = "Мы решили перенести релиз на 15 декабря из-за бага в платёжном модуле"
CHINESE = "我们决定使用PostgreSQL作为主数据库，Redis作为缓存"
# Capitalised Cyrillic, a word in guillemets, and a Chinese word glued into a longer one by jieba.
RUSSIAN_CAPS = "Ветеринар сказал: у Барсика «хроническая» болезнь почек. КАСКО продлим в марте"
CHINESE_CAT = "李娜的猫叫咪咪"
OTHERS = [
    "the quarterly report is due on friday, finance wants the numbers early",
    "we moved the standup to ten so the design team can join",
    "Отпуск у Марины начинается в июле, она едет на Байкал",
    "下周三我们去杭州出差，需要提前订酒店",
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (RUSSIAN, Language.RUSSIAN),
        (CHINESE, Language.CHINESE),  # Chinese around Latin product names is Chinese
        ("Let's ship the Redis upgrade on Monday", Language.ENGLISH),
        ("Деплой через Kubernetes, как обычно", Language.RUSSIAN),
        ("ok 好的", Language.CHINESE),
        ("12:30 👍", None),
    ],
)
def test_a_texts_language_is_read_off_its_script(text, expected):
    assert detect(text) == expected


def test_the_callers_language_wins_then_the_tenants_then_the_script():
    assert language_of(RUSSIAN, given="zh", default="en") == "zh"
    assert language_of(RUSSIAN, default="en") == "en"
    assert language_of(RUSSIAN, default="auto") == "ru"
    assert language_of("12:30") == "en"


def test_chinese_is_read_as_words_and_their_characters_and_other_text_is_left_as_it_is():
    words = index_text(CHINESE).split()
    assert {"数据库", "数据", "PostgreSQL", "缓存"} <= set(words)
    # Each word is followed by its characters: "猫" is found inside "猫叫", which jieba keeps whole.
    assert index_text("李娜的猫叫咪咪").split() == [
        "李娜",
        "李",
        "娜",
        "的",
        "猫叫",
        "猫",
        "叫",
        "咪咪",
        "咪",
        "咪",
    ]
    assert index_text(RUSSIAN) == RUSSIAN
    # Query words: stopwords of every language go ("的", "и", "the"), and so do stopword
    # characters ("据"); each word once.
    assert list(query_terms("的 数据库 и the Платёжный").words) == [
        "数据",
        "数",
        "据库",
        "库",
        "数据库",
        "платёжный",
    ]


def test_text_an_earlier_release_segmented_gets_the_characters_index_text_gives_now():
    earlier = " 李娜 的 猫叫 咪咪 \n 我们 决定 使用 PostgreSQL"
    assert with_characters(earlier).split() == index_text("李娜的猫叫咪咪\n我们决定使用PostgreSQL").split()


def test_the_hot_index_is_given_lower_case_text_split_at_any_punctuation():
    # RediSearch 2.10 folds ASCII letters only, and splits at ASCII punctuation only.
    assert hot_text("У Барсика «хроническая» болезнь; КАСКО — 70 тысяч. Café") == (
        "у барсика  хроническая  болезнь; каско   70 тысяч. café"
    )
    assert hot_text("Let's ship it, Bob!") == "let's ship it, bob!"


def text_ranks(tenant, query):
    """The episodes the full-text lists alone rank for ``query``, best first, with their text rank."""
    found = search(
        tenant=tenant,
        query=SearchQuery(text=query, text_only=True, explain=True, record_access=False),
        now=timezone.now(),
    )
    return [(h.episode.pk, h.explain["text_rank"]) for h in found.hits]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("layer", ["hot", "warm", "cold"])
def test_chinese_and_russian_turns_are_found_by_their_words_in_every_layer(caller, layer):
    ids = {
        name: pk(turns(caller, name, [text, "ok"])["episode_ids"][0])
        for name, text in [
            ("ru", RUSSIAN),
            ("zh", CHINESE),
            ("ru_caps", RUSSIAN_CAPS),
            ("zh_cat", CHINESE_CAT),
        ]
        + [(f"o{i}", t) for i, t in enumerate(OTHERS)]
    }
    assert dict(
        Turn.objects.across_tenants("test")
        .filter(text__in=[RUSSIAN, CHINESE])
        .values_list("text", "language")
    ) == {
        RUSSIAN: "ru",
        CHINESE: "zh",
    }
    if layer != "hot":
        for episode_id in ids.values():
            episode_pack(
                tenant=caller.tenant, episode_id=episode_id, layer=layer, now=timezone.now(), actor="test"
            )
        assert set(
            Episode.objects.across_tenants("test").filter(pk__in=ids.values()).values_list("layer", flat=True)
        ) == {layer}
    tenant = caller.tenant
    # The two examples, first by the full-text list alone.
    assert text_ranks(tenant, "数据库")[0] == (ids["zh"], 1)
    assert text_ranks(tenant, "платёжный модуль")[0] == (ids["ru"], 1)
    # An English word inside Chinese text; an inflected Russian query (another case, no ё);
    # a Chinese word inside a longer one ("主数据库" holds "数据").
    assert text_ranks(tenant, "PostgreSQL")[0][0] == ids["zh"]
    assert text_ranks(tenant, "о платежных модулях")[0][0] == ids["ru"]
    assert text_ranks(tenant, "数据")[0][0] == ids["zh"]
    assert text_ranks(tenant, "релизы")[0][0] == ids["ru"]
    # A capitalised word by a lower-case query (the hot index folds Cyrillic case only as given it),
    # a word in guillemets, and a Chinese character jieba had glued into a word.
    assert text_ranks(tenant, "каско")[0][0] == ids["ru_caps"]
    assert text_ranks(tenant, "барсику")[0][0] == ids["ru_caps"]
    assert text_ranks(tenant, "хроническая")[0][0] == ids["ru_caps"]
    assert text_ranks(tenant, "猫")[0][0] == ids["zh_cat"]
    # Words of neither text find neither.
    assert not {ids["ru"], ids["zh"]} & {e for e, _ in text_ranks(tenant, "出差 酒店")}


@pytest.mark.django_db(transaction=True)
def test_a_turns_language_is_the_callers_or_the_tenants_and_shows(caller):
    body = caller.post(
        "/api/v1/turns",
        {
            "session_id": "s",
            "turns": [
                {"role": "user", "text": "Привет, это тест", "language": "en"},
                {"role": "assistant", "text": "12:30"},
            ],
        },
    )
    assert body.status_code == 201
    assert list(
        Turn.objects.across_tenants("test")
        .filter(tenant=caller.tenant)
        .order_by("seq")
        .values_list("language", flat=True)
    ) == [
        "en",
        "en",
    ]
    policy = policy_row(caller.tenant)
    policy.language = "zh"
    policy.save()
    memory = caller.post("/api/v1/memories", {"text": "12:30 meeting"}).json()
    assert memory["turns"][0]["language"] == "zh"
    refused = caller.post(
        "/api/v1/turns", {"session_id": "s", "turns": [{"role": "user", "text": "x", "language": "fr"}]}
    )
    assert refused.status_code == 400 and "language" in str(refused.json())
    assert Turn.objects.across_tenants("test").filter(tenant=caller.tenant).count() == 3


@pytest.mark.django_db(transaction=True)
def test_an_outsider_finds_nothing_of_anothers_chinese_or_russian(caller, outsider):
    turns(caller, "ru", [RUSSIAN, "ok"])
    turns(caller, "zh", [CHINESE, "ok"])
    for query in ("数据库", "платёжный модуль", "PostgreSQL"):
        assert outsider.post("/api/v1/search", {"query": query}).json()["results"] == []
        assert text_ranks(outsider.tenant, query) == []


@pytest.mark.django_db(transaction=True)
def test_the_local_model_is_not_asked_to_embed_a_chinese_query(caller):
    turns(caller, "zh", [CHINESE, "好的"])
    turns(caller, "ru", [RUSSIAN, "Понятно"])

    def found(query, **options):
        result = search(
            tenant=caller.tenant,
            query=SearchQuery(text=query, explain=True, record_access=False, **options),
            now=timezone.now(),
        )
        assert not result.degraded  # by design, not for want of a vector
        return result.hits

    def vector_ranks(query):
        return [h.explain["vector_rank"] for h in found(query)]

    # Its vectors of Chinese only added noise to the fused ranking (docs/decisions/0034): a Chinese
    # query is ranked by full text alone, and finds by it.
    assert vector_ranks("数据库") == [None]
    # With min_score it is embedded, for the threshold only: the ranking is the same.
    kept = found("数据库", min_score=-1.0)
    assert [h.explain["vector_rank"] for h in kept] == [None] and kept[0].similarity is not None
    # Russian and English queries are embedded: every episode comes through the vector list.
    assert all(rank is not None for rank in vector_ranks("платёжный модуль"))
    assert all(rank is not None for rank in vector_ranks("payment module"))


@pytest.mark.django_db(transaction=True)
def test_the_local_models_vectors_count_half_for_a_russian_query(caller):
    """It reads Russian only in part: its list keeps finding paraphrases, at half the weight of
    the full-text list (docs/decisions/0035); English queries fuse the two lists as set."""
    turns(caller, "ru", [RUSSIAN, "Понятно, договорились"])
    turns(caller, "en", ["We moved the release to the 15th because of a bug in the payment module", "ok"])
    policy = policy_row(caller.tenant)
    fused = set()
    for query, reading in (("платёжный модуль релиз", 0.5), ("payment module release", 1.0)):
        hits = search(
            tenant=caller.tenant,
            query=SearchQuery(text=query, explain=True, record_access=False),
            now=timezone.now(),
        ).hits
        for hit in hits:
            ranks = hit.explain["vector_rank"], hit.explain["text_rank"]
            if None in ranks:
                continue
            expected = policy.rrf_vector_weight * reading / (
                policy.rrf_k + ranks[0]
            ) + policy.rrf_text_weight / (policy.rrf_k + ranks[1])
            assert hit.explain["rrf"] == pytest.approx(expected), (query, hit.explain)
            fused.add(query)
    assert len(fused) == 2  # each query had a hit that both lists found
