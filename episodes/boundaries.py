"""Where a text may be cut to fit a budget, in English, Russian and Chinese; ``shorten`` is the one
cut every shape uses (a cold headline, a warm summary over its budget, a tag): it ends on a word
or clause boundary, never inside a word or a number, and "…" marks that something was cut
(docs/decisions/0041).

A text is read as a row of units that are never split: a word with its inner marks ("e-mail",
"it's", "example.com"), a number with its separators ("1,750", "3.5", "12:30", "1 750"), and,
in Chinese, which has no spaces, a word as ``jieba`` segments it. Anything between units (spaces,
punctuation) is a place to cut. Of the places within the budget, the cut prefers, in turn: the
last clause end (".", ";", ":", "—", ",", "。", "，", "；", "！", "？", "、") in the later half of
the budget; the last word in the later half that is not a stopword (a headline ending "over…" or
"для…" reads as broken); the last word at all. A single word longer than the budget is the only
thing ever cut inside.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import chain

from .language import HAN_RUN, chinese_tagged, stopwords, width

ELLIPSIS = "…"

# Kana are read character by character, like Han characters that jieba does not group.
_KANA = "\u3040-\u30ff"
_LETTER = rf"[^\W_{_KANA}\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"
#: A unit outside Chinese text: digits grouped by spaces ("1 750", as Russian writes thousands),
#: or letters and digits joined by inner marks ("1,750", "e-mail", "it's", "12:30", "v2.1").
_UNIT = re.compile(
    rf"\d{{1,3}}(?:[ \u00a0\u202f]\d{{3}}(?!\d))+(?:[.,]\d+)?|{_LETTER}+(?:[.,'’\-/:]{_LETTER}+)*|[{_KANA}]"
)
#: What ends a clause (the comma and colon of "1,750" or "12:30" are inside a unit, not here).
CLAUSE_MARKS = frozenset(".;:—–,!?…。，；：！？、")
# Never left before the ellipsis.
_LEFT_OFF = " -" + "".join(CLAUSE_MARKS)
#: Kept after the last word of a cut when they close what it opened.
_CLOSERS = "\"'”’»)]」』）"


def _units(text: str, stop: int) -> Iterator[tuple[int, int]]:
    """The (start, end) of the units of ``text`` in order, up to the first that ends after ``stop``
    (a Chinese run is segmented whole, so that its last word within ``stop`` is a word)."""
    position = 0
    for run in chain(HAN_RUN.finditer(text), [None]):
        start, end = run.span() if run else (len(text), len(text))
        for unit in _UNIT.finditer(text, position, start):
            yield unit.span()
            if unit.end() > stop:
                return
        if run is None:
            return
        for word, _ in chinese_tagged(run.group()):
            yield start, start + len(word)
            start += len(word)
            if start > stop:
                return
        position = end


def _clause_end(text: str, end: int) -> bool:
    """Whether a clause mark follows the unit ending at ``end`` (after closing quotes or brackets
    and a space, as in "word — word" or 'said "yes", then')."""
    rest = text[end : end + 4].lstrip(_CLOSERS + " ")
    return bool(rest) and rest[0] in CLAUSE_MARKS


def shorten(text: str, limit: int) -> str:
    """``text`` (its whitespace collapsed) within ``limit`` as ``width`` counts it, cut at the best
    boundary (see the module) with "…" after it; unchanged when it fits."""
    text = " ".join(text.split())
    if width(text) <= limit:
        return text
    room = limit - width(ELLIPSIS)
    fits, used = 0, 0
    for char in text:
        used += width(char)
        if used > room:
            break
        fits += 1
    half = room / 2
    clause = word = content = 0
    for start, end in _units(text, fits):
        if end > fits:
            break
        word = end
        later = width(text[:end]) >= half
        if later and _clause_end(text, end):
            clause = end
        if later and text[start:end].lower() not in stopwords():
            content = end
    cut = clause or content or word
    if not cut:  # one word longer than the budget: the only cut inside a word
        return text[:fits].rstrip(_LEFT_OFF) + ELLIPSIS
    while cut < fits and text[cut] in _CLOSERS:  # 'said "yes"…', not 'said "yes…'
        cut += 1
    return text[:cut] + ELLIPSIS
