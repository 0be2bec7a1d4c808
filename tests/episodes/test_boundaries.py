"""Text cut to a budget on word and clause boundaries, in English, Russian and Chinese."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from episodes.boundaries import ELLIPSIS, shorten
from episodes.language import width

RENT = "Got it: up to 1,750 EUR a month for the flat in Arroios"
EMAIL = "Prefers email over phone calls for support."
RUSSIAN = "Бюджет на квартиру: до 1 750 евро в месяц, лучше в районе Арройуш"
CHINESE = "我们决定使用PostgreSQL作为主数据库，Redis作为缓存，下周一开始迁移"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        # Never "1,7…" nor "1…": the number is whole or left out.
        (RENT, 16, "Got it: up to…"),
        (RENT, 20, "Got it: up to 1,750…"),
        (RENT, 30, "Got it: up to 1,750 EUR…"),  # not "... EUR a…": a stopword does not end a cut
        (EMAIL, 20, "Prefers email…"),  # not "Prefers email over…"
        (EMAIL, 30, "Prefers email over phone…"),
        (EMAIL, 60, EMAIL),
        # A clause end in the later half of the budget is preferred to a later word.
        (RUSSIAN, 30, "Бюджет на квартиру…"),
        (RUSSIAN, 40, "Бюджет на квартиру: до 1 750 евро…"),  # "1 750" is one number
        (RUSSIAN, 50, "Бюджет на квартиру: до 1 750 евро в месяц…"),
        # Chinese: after a clause mark, else between words; never inside "PostgreSQL".
        (CHINESE, 30, "我们决定使用PostgreSQL…"),
        (CHINESE, 60, "我们决定使用PostgreSQL作为主数据库…"),
        (CHINESE, 70, "我们决定使用PostgreSQL作为主数据库，Redis作为缓存…"),
        ("下周三我们去杭州出差需要提前订酒店和机票", 25, "下周三我们去杭州…"),
        # Closing quotes stay with their word; one word longer than the budget is all that is cut inside.
        ('He said "yes", then left for the airport at 12:30 sharp', 20, 'He said "yes"…'),
        ("Supercalifragilisticexpialidocious is long", 10, "Supercali…"),
    ],
)
def test_cuts_end_on_a_word_or_clause_boundary(text, limit, expected):
    assert shorten(text, limit) == expected
    assert width(shorten(text, limit)) <= limit


# --- the property: any sentence, any budget ------------------------------------------------------

ENGLISH_WORDS = ["the", "flat", "over", "email", "support", "Arroios", "month", "a", "for", "it's", "e-mail"]
RUSSIAN_WORDS = ["для", "квартиру", "в", "месяц", "электронной", "почте", "не", "Барсика", "по-русски"]
CHINESE_WORDS = ["我们", "决定", "使用", "数据库", "作为", "缓存", "下周", "杭州", "出差", "酒店", "的", "和"]
NUMBERS = st.one_of(
    st.integers(0, 9_999_999).map(lambda n: f"{n:,}"),  # 1,750
    st.integers(1_000, 999_999).map(lambda n: f"{n:,}".replace(",", " ")),  # 1 750
    st.tuples(st.integers(0, 99), st.integers(0, 99)).map(lambda t: f"{t[0]}.{t[1]}"),  # 3.5
    st.tuples(st.integers(0, 23), st.integers(0, 59)).map(lambda t: f"{t[0]}:{t[1]:02d}"),  # 12:30
)
SEPARATORS = [" ", " ", " ", ", ", "; ", ": ", " — ", ". ", " (", ") ", ' "', '" ']
CHINESE_MARKS = ["", "", "", "。", "，", "；", "！", "？", "、"]


def _sentence(words, separators):
    return st.lists(st.tuples(words, st.sampled_from(separators)), min_size=1, max_size=30).map(
        lambda parts: "".join(w + s for w, s in parts)
    )


SENTENCES = st.one_of(
    _sentence(st.one_of(st.sampled_from(ENGLISH_WORDS), NUMBERS), SEPARATORS),
    _sentence(st.one_of(st.sampled_from(RUSSIAN_WORDS), NUMBERS), SEPARATORS),
    # Chinese with Latin words and numbers inside, and no spaces.
    _sentence(
        st.tuples(
            st.one_of(st.just(""), st.sampled_from(["PostgreSQL", "Redis"]), NUMBERS),
            st.sampled_from(CHINESE_WORDS),
        ).map("".join),
        CHINESE_MARKS,
    ),
)
# What must never be split: a number with its separators, and a run of Latin or Cyrillic letters.
NUMBER = re.compile(r"\d{1,3}(?: \d{3})+|\d+(?:[.,:]\d+)*")
LETTERS = re.compile(r"[A-Za-zА-Яа-яЁё]+(?:['’-][A-Za-zА-Яа-яЁё]+)*")


@settings(max_examples=400, derandomize=True, deadline=None)
@given(text=SENTENCES, limit=st.integers(16, 130))
def test_a_cut_is_a_prefix_ending_on_a_boundary_and_never_splits_a_word_or_a_number(text, limit):
    whole = " ".join(text.split())
    cut = shorten(text, limit)
    assert width(cut) <= limit
    if width(whole) <= limit:
        assert cut == whole
        return
    assert cut.endswith(ELLIPSIS)
    kept = cut[: -len(ELLIPSIS)]
    assert kept and whole.startswith(kept), (whole, cut)
    # The ellipsis alone marks the cut: no space, comma or dash is left before it.
    assert kept[-1] not in " ,;:—.。，；：、", cut
    at = len(kept)
    for pattern in (NUMBER, LETTERS):
        for unit in pattern.finditer(whole):
            assert not unit.start() < at < unit.end(), (whole, cut, unit.group())
