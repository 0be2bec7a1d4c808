"""The languages memory is kept in, and how full text reads each (BM25 over Chinese, Russian and
English: docs/decisions/0024-languages-in-full-text.md).

A turn's language is the caller's when given, else the tenant policy's when it names one, else
read off its script (``detect``): Chinese characters, Cyrillic or Latin letters. It decides how the
hot index analyses the turn (RediSearch's per-document language: Snowball stemming for English
and Russian, ``chinese`` for Chinese) and, later, extraction and summaries.

Both tiers read Chinese the same way: segmented into words by ``jieba`` in Python
(``index_text``), since neither analyser would find "数据库" inside "作为主数据库" on its own
(docs/decisions/0024). Postgres then analyses every row with one configuration, ``TEXT_CONFIG``.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .layers import _Choices

#: Postgres's built-in ``russian`` configuration stems Cyrillic words with Snowball's Russian
#: stemmer and Latin ones with the English stemmer and stopwords (``asciiword`` maps to
#: ``english_stem``), and keeps Chinese words (segmented beforehand) whole: one configuration for
#: the three languages, so a row's analysis never depends on a guess of its language, and a
#: Russian turn's English terms match an English query. On English text it gives the ``english``
#: configuration's lexemes exactly (docs/decisions/0024 shows the check).
TEXT_CONFIG = "russian"


class Language(StrEnum, metaclass=_Choices):
    ENGLISH = "en"
    RUSSIAN = "ru"
    CHINESE = "zh"


#: What RediSearch calls each language (its per-document ``LANGUAGE`` and per-query ``LANGUAGE``).
REDISEARCH: dict[str, str] = {
    Language.ENGLISH: "english",
    Language.RUSSIAN: "russian",
    Language.CHINESE: "chinese",
}

# CJK Unified Ideographs with extension A and the compatibility block; Cyrillic with its supplement.
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
HAN_RUN = re.compile(f"[{_HAN}]+")
_CYRILLIC = re.compile("[\u0400-\u052f]")
_LATIN = re.compile("[A-Za-z\u00c0-\u024f]")
#: A Chinese character carries about a word, a Latin or Cyrillic letter a fifth of one: a turn
#: with as many Chinese characters as a fifth of its letters is Chinese.
_HAN_WEIGHT = 5

#: A query's words: letters and digits of any script, without "_" (punctuation would reach
#: RediSearch escaped, "group\\?", and match nothing).
WORD = re.compile(r"[^\W_]+", re.UNICODE)


#: How much a Chinese character weighs against a Latin or Cyrillic one when texts are measured for
#: a budget: a translation into English runs about three times as many characters.
HAN_WIDTH = 3


def width(text: str) -> int:
    """``text``'s length with each Chinese character counted as ``HAN_WIDTH``: budgets in
    characters (summaries, headlines) then hold about as much in every language."""
    return len(text) + (HAN_WIDTH - 1) * sum(len(run) for run in HAN_RUN.findall(text))


def detect(text: str) -> str | None:
    """The language of ``text`` by its script, or None when it has no letters to tell by."""
    han = sum(len(run) for run in HAN_RUN.findall(text))
    cyrillic = len(_CYRILLIC.findall(text))
    latin = len(_LATIN.findall(text))
    if not (han or cyrillic or latin):
        return None
    if han * _HAN_WEIGHT >= cyrillic + latin:
        return Language.CHINESE
    return Language.RUSSIAN if cyrillic > latin else Language.ENGLISH


def language_of(text: str, *, given: str = "", default: str = "") -> str:
    """A turn's language: the caller's (``given``), else the tenant's ``default`` (a policy naming
    one; "" or "auto" to read it off the text), else the text's script, else English."""
    if given:
        return given
    if default and default != "auto":
        return default
    return detect(text) or Language.ENGLISH


@functools.cache
def _jieba() -> Any:
    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()  # the dictionary, once per process (about a second)
    return jieba


def _words(run: str) -> list[str]:
    """A run of Chinese characters as its words, with the shorter words inside long ones
    (``cut_for_search``: "数据库" also gives "数据"), so a word is found inside a longer one."""
    return [w for w in _jieba().cut_for_search(run) if w.strip()]


def chinese_tagged(run: str) -> list[tuple[str, str]]:
    """A run of Chinese characters as its words with ``jieba``'s part-of-speech tags ("nr" a
    person, "ns" a place, "nt" an organisation, "nz" another proper noun, ...)."""
    return [(pair.word, pair.flag) for pair in _posseg().lcut(run)]


@functools.cache
def _posseg() -> Any:
    _jieba()
    import jieba.posseg

    return jieba.posseg


def has_han(text: str) -> bool:
    return HAN_RUN.search(text) is not None


def has_cyrillic(text: str) -> bool:
    return _CYRILLIC.search(text) is not None


def _with_characters(word: str, dropped: frozenset[str]) -> list[str]:
    """A Chinese word followed by its characters (but ``dropped``) when it has more than one."""
    if len(word) < 2:
        return [word]
    return [word, *(c for c in word if c not in dropped)]


def _terms(run: str, dropped: frozenset[str]) -> list[str]:
    """A run of Chinese characters as full text reads it: each word but ``dropped``, each followed
    by its characters. The characters find a word that jieba glued into a longer one ("猫" in
    "猫叫"), and words built on the same characters ("总共" and "一共", "月均" and "平均"),
    as Lucene's CJK analysis keeps unigrams beside words; BM25's IDF keeps the common ones light."""
    return [term for word in _words(run) if word not in dropped for term in _with_characters(word, dropped)]


def _segmented(text: str, dropped: frozenset[str]) -> str:
    """``text`` with every run of Chinese characters replaced by its terms (``_terms``)."""
    if not has_han(text):
        return text
    return HAN_RUN.sub(lambda m: " " + " ".join(_terms(m.group(), dropped)) + " ", text)


def with_characters(segmented: str) -> str:
    """Text an earlier release segmented into words alone, as ``index_text`` writes it now (each
    word followed by its characters): for a migration, where the unsegmented text is gone."""
    return HAN_RUN.sub(lambda m: " ".join(_with_characters(m.group(), frozenset())), segmented)


def index_text(text: str) -> str:
    """``text`` as the full-text indexes read it: every run of Chinese characters as its terms
    (``_terms``: words and their characters, space-separated); anything else as it is (so text
    without Chinese is returned unchanged)."""
    return _segmented(text, frozenset())


@functools.cache
def stopwords() -> frozenset[str]:
    """Query words that tell nothing, in the three languages (the lists redisvl bundles, from NLTK)."""
    from redisvl.utils.stopwords import get_stopwords

    return frozenset().union(*(get_stopwords(name) for name in ("english", "russian", "chinese")))


#: Characters RediSearch's tokenizer would keep inside a word: any non-ASCII one that is neither a
#: letter, a digit nor a space (it splits on ASCII punctuation only, so "«отлично»" was one word).
_UNSPLIT = re.compile(r"[^\w\s\x00-\x7f]")


def hot_text(text: str) -> str:
    """``text`` as the hot index is given it: lower-cased, and non-ASCII punctuation as spaces.

    RediSearch 2.10 folds the case of ASCII letters only (RediSearch issues #814, #2015): a
    document's "Барсика" or "КАСКО" never met a query, which is lower-cased. ASCII text comes
    out as RediSearch would have read it anyway."""
    return _UNSPLIT.sub(" ", text.lower())


#: What one query may ask of the full-text engines that every tenant shares (both tiers; see
#: docs/decisions/0037-queries-that-cannot-stall-the-engines.md). A query's words count once each;
#: it keeps its first ``MAX_QUERY_TERMS`` words (a question has about ten), and leaves out words
#: longer than ``MAX_TERM_CHARS`` (no language has them; Postgres cannot index one of 2,047 bytes).
MAX_QUERY_TERMS = 64
MAX_TERM_CHARS = 100


@dataclass(frozen=True)
class QueryTerms:
    """A query as the full-text engines are given it: its words (``words``: lower-cased, Chinese
    segmented, stopwords of any language dropped, each once, within the caps above), the text
    Postgres's parser reads (``text``), and why words were left out ("" when none were)."""

    words: tuple[str, ...]
    text: str
    narrowed: str = ""


@functools.lru_cache(maxsize=256)
def query_terms(text: str) -> QueryTerms:
    """``text`` as the full-text engines of both tiers are given it (``QueryTerms``). Postgres reads
    the query as it came (Chinese segmented without its stopwords; the configuration knows the
    English and Russian ones), unless words were left out: then it reads the words kept. Kept for
    the last queries: one search asks for it from each tier and for ``explain``."""
    segmented = _segmented(text, stopwords())
    found = [w for w in WORD.findall(segmented.lower()) if w not in stopwords()]
    unique = list(dict.fromkeys(found))
    words = [w for w in unique if len(w) <= MAX_TERM_CHARS]
    notes = []
    if len(words) < len(unique):
        notes.append(f"{len(unique) - len(words)} word(s) longer than {MAX_TERM_CHARS} characters left out")
    if len(words) > MAX_QUERY_TERMS:
        notes.append(f"the first {MAX_QUERY_TERMS} of its {len(words)} distinct words searched")
        words = words[:MAX_QUERY_TERMS]
    if not notes:
        return QueryTerms(tuple(words), segmented)
    return QueryTerms(tuple(words), " ".join(words), "query narrowed: " + "; ".join(notes))


def query_text(text: str) -> str:
    """A query as Postgres's parser should read it (``query_terms``)."""
    return query_terms(text).text


def query_language(text: str) -> str:
    """The language a query is analysed in by the hot index (one per query: Chinese when it holds
    Chinese, Russian when mostly Cyrillic, else English)."""
    if has_han(text):
        return Language.CHINESE
    return detect(text) or Language.ENGLISH
