"""Entities, decisions and sentences in English, Russian and Chinese (docs/decisions/0027), and the
guarantee that compression keeps every one of them in all three languages."""

from __future__ import annotations

import pytest

from episodes.extraction import extract_decisions, extract_entities, split_sentences
from lifecycle.compression import ExtractiveSummariser
from lifecycle.models import MemoryPolicy

from ..lifecycle.test_compression import CONVERSATION as ENGLISH

CHINESE = [
    "张伟，我们下周一要和阿里巴巴的团队在北京开会，讨论新的支付系统。",
    "好的。预算方面，王经理说最多三百万元，我们必须在2024年3月15日之前上线。",
    "我们决定使用PostgreSQL作为主数据库，Redis作为缓存，这样性能更好，维护成本也更低。",
    "测试由李娜负责，她说至少需要两周时间，因为支付模块的边界情况很多，还要做压力测试。",
    "明白了。那我们就把发布日期定在3月15日，如果测试发现严重问题再推迟一周。",
    "另外，上海办公室的同事也会远程参加会议，请提前把会议链接发给他们。",
    "还有一件事：新系统的监控要接入Grafana，告警发到运维群里，值班表由赵磊来排。",
    "没问题。上线前一周我们再开一次评审会，确认所有测试用例都通过了再发布。",
]
RUSSIAN = [
    "Привет, Ольга! Мы вчера обсуждали релиз платёжного модуля с командой из Новосибирска.",
    "Да, Иван Петров говорил, что там серьёзный баг в обработке возвратов. Сколько времени нужно?",
    "Мы решили перенести релиз на 15 декабря из-за бага в платёжном модуле. Бюджет на доработку 300 тыс. "
    "рублей, т.е. чуть больше, чем планировали в сентябре.",
    "Хорошо. Тестированием займётся Мария, ей нужно минимум две недели на регрессию и нагрузочные тесты.",
    "Договорились, что демо для заказчика проведём в Москве, в офисе на ул. Ленина, 5 декабря.",
    "Отлично, я отправлю всем приглашение и напишу Сергею из «Сбербанка», чтобы он тоже подключился.",
    "Ещё нужно обновить документацию API и предупредить службу поддержки о новой дате релиза.",
    "Конечно. Документацию обновит Алексей, он уже начал переписывать раздел про возвраты.",
]


def test_chinese_entities_are_names_places_organisations_dates_amounts_and_latin_words():
    entities = extract_entities("\n".join(CHINESE))
    expected = {"张伟", "阿里巴巴", "北京", "李娜", "上海", "赵磊", "三百万元", "2024年3月15日", "3月15日"}
    # Latin words inside Chinese text, with no space around them (found by no \b pattern)
    assert expected | {"PostgreSQL", "Redis", "Grafana"} <= set(entities), entities
    assert not {"我们", "支付系统", "测试"} & set(entities)  # common words are not entities


def test_russian_entities_are_names_dates_amounts_and_keep_a_full_name_that_opens_a_sentence():
    entities = extract_entities("\n".join(RUSSIAN))
    expected = {"Ольга", "Новосибирска", "Иван Петров", "15 декабря", "5 декабря", "300 тыс", "Мария"}
    assert expected | {"Москве", "Сбербанка", "API", "Алексей"} <= set(entities), entities
    # words that only open a sentence are not names
    assert not {"Привет", "Хорошо", "Отлично", "Конечно", "Ещё", "Тестированием"} & set(entities)


def test_a_word_that_only_opens_sentences_is_not_a_name_but_one_written_inside_one_is():
    text = "Seeing you happy is great! Anything new? Melanie went to Paris. Thanks, Melanie! Appreciate it."
    assert extract_entities(text) == ["Melanie", "Paris"]
    assert extract_entities("Appreciate it. Melanie went home.") == []
    # a run opening a sentence keeps its name; "seeing" written in lower case is a common word
    assert extract_entities("Seeing Caroline happy is great; seeing is believing.") == ["Caroline"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Dr. Smith went to Washington on Jan. 5. He paid $3.50! Was it good? Yes, e.g. very. The end.",
            [
                "Dr. Smith went to Washington on Jan. 5.",
                "He paid $3.50!",
                "Was it good?",
                "Yes, e.g. very.",
                "The end.",
            ],
        ),
        (
            "Мы решили, т.е. договорились. Офис на ул. Ленина. А. С. Пушкин тоже там был! Правда?",
            ["Мы решили, т.е. договорились.", "Офис на ул. Ленина.", "А. С. Пушкин тоже там был!", "Правда?"],
        ),
        (
            "我们决定了。这样更快！你同意吗？“好的。”",
            ["我们决定了。", "这样更快！", "你同意吗？", "“好的。”"],
        ),
        ("Version 2.5 is out.\nNext line", ["Version 2.5 is out.", "Next line"]),
    ],
)
def test_sentences_end_where_each_language_ends_them(text, expected):
    assert split_sentences(text) == expected


def test_decisions_are_found_by_their_cues_in_each_language():
    assert extract_decisions("\n".join(CHINESE)) == [
        "我们决定使用PostgreSQL作为主数据库，Redis作为缓存，这样性能更好，维护成本也更低。"
    ]
    decisions = extract_decisions("\n".join(RUSSIAN))
    assert decisions[0] == "Мы решили перенести релиз на 15 декабря из-за бага в платёжном модуле."
    # "300 тыс. рублей, т.е. чуть" ends no sentence
    assert split_sentences(RUSSIAN[2])[1].startswith("Бюджет") and len(split_sentences(RUSSIAN[2])) == 2
    assert any(d.startswith("Договорились, что демо") for d in decisions)


@pytest.mark.parametrize("conversation", [ENGLISH, RUSSIAN, CHINESE], ids=["en", "ru", "zh"])
def test_compression_keeps_every_entity_and_decision_in_each_language(conversation):
    summariser = ExtractiveSummariser(MemoryPolicy())
    warm = summariser.warm(conversation)
    for turn in conversation:
        assert set(extract_entities(turn, limit=10_000)) <= set(warm.entities)
        assert set(extract_decisions(turn, limit=10_000)) <= set(warm.decisions)
    raw = sum(map(len, conversation))
    # a Chinese character weighs as three letters in the budgets, so Chinese is compressed too
    assert warm.chars < raw / 1.5, (raw, warm.chars)
    cold = summariser.cold(warm)
    assert cold.chars < warm.chars and cold.headline and cold.tags


def test_headlines_are_cut_after_a_clause_in_chinese():
    summariser = ExtractiveSummariser(MemoryPolicy())
    cold = summariser.cold(summariser.warm(CHINESE))
    assert cold.headline.endswith("…")
    assert cold.headline[-2] not in "，、；：", cold.headline
    assert "PostgreSQL" in cold.tags or "Redis" in cold.tags or any(len(t) <= 4 for t in cold.tags), cold.tags
