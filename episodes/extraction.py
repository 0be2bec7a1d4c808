"""Entities, decisions and sentences, extracted offline and deterministically, in English,
Russian and Chinese (docs/decisions/0027-extraction-in-three-languages.md).

Used at ingest (stored on the episode) and by the summarisers, which keep both lists verbatim in
the warm shape so nothing named or decided is lost by compression
(docs/concepts.md#entities-and-decisions).

- Latin and Cyrillic text: patterns (addresses, dates, numbers with units, code, acronyms, quotes)
  and runs of capitalised words. A capitalised word that opens a sentence is a name only when the
  same text also writes it capitalised inside a sentence: "Seeing" or "Anything" at the start of a
  line are not names, "Melanie" is, once she is mentioned anywhere else (docs/decisions/0027).
- Chinese text: the words ``jieba`` tags as names of people, places, organisations and other
  proper nouns; dates and amounts written the Chinese way (2023年12月15日, 980元, 三百万元); and
  the Latin words inside it (PostgreSQL in 使用PostgreSQL作为), found once the Chinese characters
  are out of the way.
- Sentences end at . ! ? … (not after an abbreviation or an initial, nor before a lower-case word)
  and at 。！？, Chinese sentences need no space after them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .language import HAN_RUN, WORD, chinese_tagged

_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December|"
    "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
_RU_MONTHS = "января|февраля|марта|апреля|мая|июня|июля|августа|сентября|октября|ноября|декабря"
_UNITS = (
    "%|km|kg|ms|GB|MB|k|m|h|years?|days?|hours?|minutes?|"
    "руб(?:лей|ля|ль|\\.)?|₽|тыс\\.?|млн|млрд|км|кг|лет|года?|дней|дня|часов|часа|минут|мин\\.?"
)
_PATTERNS = [
    re.compile(r"https?://[^\s<>\"')\]]+"),
    re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b"),
    re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b"),
    re.compile(rf"\b\d{{1,2}} (?:{_MONTHS}),? \d{{4}}\b"),
    re.compile(rf"\b(?:{_MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?(?:,? \d{{4}})?\b"),
    re.compile(rf"\b(?:{_MONTHS}) \d{{4}}\b"),
    re.compile(rf"\b\d{{1,2}} (?:{_RU_MONTHS})(?: \d{{4}}(?: г(?:ода|\.)?)?)?(?!\w)"),
    re.compile(r"`([^`\n]{1,80})`"),
    re.compile(r"\b[A-ZА-ЯЁ][A-ZА-ЯЁ0-9]{1,9}s?\b"),  # acronyms: LGBTQ, API, NASA, МТС
    re.compile(r"[\"“«]([^\"”»\n]{2,80})[\"”»]"),
    re.compile(r"\b[a-z]+(?:_[a-z0-9]+)+\b"),  # snake_case
    re.compile(r"\b[a-z]+(?:[A-Z][a-z0-9]+)+\b"),  # camelCase
    re.compile(r"\b[A-Z][a-z]+[A-Z][A-Za-z0-9]*\b"),  # PostgreSQL, GitHub, JavaScript
    re.compile(r"\b[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*){1,}\(\)?"),  # dotted.calls()
    re.compile(rf"(?<![\w.])[$€£]?\d+(?:[.,]\d+)*(?:\s?(?:{_UNITS})(?!\w))?"),
]
# Runs of capitalised words (Latin or Cyrillic): names, places, products, titles.
_NAME = re.compile(r"\b[A-ZА-ЯЁ][a-zа-яё'’]+(?:[ -](?:of |the |de |van |von )?[A-ZА-ЯЁ][a-zа-яё'’]+)*\b")
_STOP_CAPS = {
    "I",
    "I'm",
    "I've",
    "I'd",
    "I'll",
    "The",
    "A",
    "An",
    "It",
    "It's",
    "We",
    "You",
    "He",
    "She",
    "They",
    "This",
    "That",
    "These",
    "Those",
    "My",
    "Your",
    "Our",
    "Their",
    "His",
    "Her",
    "Yes",
    "No",
    "Oh",
    "Hey",
    "Hi",
    "Hello",
    "Thanks",
    "Thank",
    "Wow",
    "Well",
    "So",
    "But",
    "And",
    "Or",
    "If",
    "When",
    "What",
    "Why",
    "How",
    "Where",
    "Who",
    "Which",
    "Do",
    "Did",
    "Does",
    "Is",
    "Are",
    "Was",
    "Were",
    "Can",
    "Could",
    "Would",
    "Should",
    "Will",
    "Let",
    "Let's",
    "Sure",
    "Okay",
    "Ok",
    "Great",
    "Good",
    "Nice",
    "Awesome",
    "Also",
    "Just",
    "Maybe",
    "Please",
    "Sounds",
    "That's",
    "There",
    "Here",
    "Haha",
    "Absolutely",
    "Definitely",
    "Really",
    "Totally",
    "Not",
    "Yeah",
    "Yep",
    "Cool",
    "As",
    "At",
    "In",
    "On",
    "For",
    "To",
    "With",
    "By",
    "From",
    "Of",
    "After",
    "Before",
    "Then",
    "Now",
    "Today",
    "Yesterday",
    "Tomorrow",
    "Since",
    "Because",
    "Glad",
    "Congrats",
    "Congratulations",
    "Amazing",
    "Wish",
    "Take",
    "Keep",
    "Have",
    "Had",
    "Been",
    "Being",
    "We'll",
    "We're",
    "Call",
    "Any",
    "All",
    "Some",
    "Each",
    "Every",
    "Most",
    "Much",
    "Many",
    "Very",
    "Lots",
    "Love",
    "Like",
    "Me",
    "Он",
    "Она",
    "Они",
    "Мы",
    "Вы",
    "Я",
    "Это",
    "Да",
    "Нет",
    "Но",
    "И",
    "А",
    "Как",
    "Что",
    "Где",
    "Когда",
}

_DECISION_CUES = re.compile(
    r"\b(?:decided|decide to|decision|we will|we'll|i will|i'll|let's|agreed|agree to|going to|plan to|"
    r"planning to|chose|choose to|settled on|will go with|opted|committed to|resolved to)\b"
    r"|(?:решил|решен|решени|договорил|будем|выбрал|согласовал|утвердил|остановились на|"
    r"приняли решение|планиру|собираемся|переносим|перенесли)"
    r"|(?:决定|决策|同意|我们将|我们会|选择了|确定了|定下|商定|敲定|拍板|打算|计划)",
    re.IGNORECASE,
)

#: Words that say a value has changed or a choice is made: a sentence with one may state a new value
#: of something an older memory holds (``lifecycle.updates``). Past choices and changes, not plans:
#: "we will look at flats" updates nothing, "we decided on Arroios" and "the rent is now 1,750" do.
_CHANGE_CUES = re.compile(
    r"\b(?:decided|decide on|chose|chosen|settled on|went with|opted for|signed|moved|relocated|"
    r"now|nowadays|these days|switched|changed|swapped|replaced|upgraded|downgraded|cancell?ed|quit|sold|bought|"
    r"no longer|not any ?more|anymore|instead|went up|went down|raised|increased|(?:my|our|a) new)\b"
    r"|(?:решил|решени|выбрал|остановились на|подписал|переех|перееза|теперь|сейчас|больше не|уже не|"
    r"перешл|перешёл|перешел|сменил|поменял|заменил|вместо|отказал|подорожал|подешевел|повысил|продал|купил|"
    r"нов(?:ый|ая|ую|ое|ого|ой) )"
    r"|(?:决定|选了|选定|签了|签约|签下|搬到|搬去|搬家|现在|如今|目前|换成|换了|改成|改为|改用|不再|"
    r"已经不|涨到|涨价|降到|降价|新的|辞职|跳槽|卖了|买了)",
    re.IGNORECASE,
)

# --- sentences -----------------------------------------------------------------------------------

#: Words that end in a full stop without ending a sentence (lower-cased, without their last dot).
_ABBREVIATION_TEXT = (
    "mr mrs ms dr prof st jr sr vs etc e.g i.e a.m p.m u.s u.k d.c approx dept fig inc ltd "
    "jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun "
    "т.е т.к т.д т.п т.н др пр см ср г гг ул д кв им проф доц стр напр зам пер просп обл р-н"
)
_ABBREVIATIONS = frozenset(_ABBREVIATION_TEXT.split())
#: Where a sentence may end: . ! ? … with any closing quotes or brackets, before a space; Chinese
#: 。！？ (no space needed); a line break.
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”»)\]]*(?=\s)|[。！？]+[”」』）]*|\n+")


def _ends_sentence(text: str, end: re.Match[str]) -> bool:
    mark = end.group()
    if not mark.startswith((".", "…")):
        return True
    # The words on either side are found by stepping from the mark, not by reading the text before
    # and after it: a long text has many marks, and copying it at each would be quadratic.
    after = end.end()
    while after < len(text) and text[after].isspace():
        after += 1
    if text[after : after + 1].islower():  # "e.g. very", "т.е. позже", "and so on... then"
        return False
    stop = end.start()
    if text[stop - 1 : stop] == "\n":
        stop -= 1  # "Dr\n. Smith": a word and the line break after it come before the mark
    start = stop
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    if start == stop:
        return True
    word_text = text[start:stop].lstrip("(\"'“«").lower()
    # not after "Dr. Smith", "Ул. Ленина", "J. K. Rowling"
    return not (
        mark == "." and (word_text in _ABBREVIATIONS or (len(word_text) == 1 and word_text.isalpha()))
    )


def split_sentences(text: str) -> list[str]:
    sentences = []
    start = 0
    for end in _SENTENCE_END.finditer(text):
        if not _ends_sentence(text, end):
            continue
        sentence = text[start : end.end()].strip()
        if sentence:
            sentences.append(sentence)
        start = end.end()
    if text[start:].strip():
        sentences.append(text[start:].strip())
    return sentences


# --- entities ------------------------------------------------------------------------------------

#: jieba's tags for proper nouns: people (nr, nrfg, nrt), places (ns), organisations (nt), others (nz).
_CHINESE_PROPER = ("nr", "ns", "nt", "nz")
_CHINESE_NUMERAL = "零一二两三四五六七八九十百千万亿"
_CHINESE_PATTERNS = [
    re.compile(r"\d{4}年(?:\d{1,2}月(?:\d{1,2}[日号])?)?|\d{1,2}月\d{1,2}[日号]"),
    re.compile(
        rf"(?:\d+(?:\.\d+)?|[{_CHINESE_NUMERAL}]+)(?:%|％|万元|亿元|元|块钱|块|美元|公里|千米|小时|分钟|个月|年|天|周|岁)"
    ),
]


def _unique(items: Iterable[str], strip: str = " \t\n,;:.!?") -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        item = item.strip(strip)
        key = item.lower()
        if item and key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _sentence_starts(text: str) -> set[int]:
    """Offsets where the first word of a sentence written in an alphabet may begin (after any
    opening quote or bracket). Chinese sentences are left out: a Latin word that opens one is
    capitalised for its own sake ("Redis很快。")."""
    out = set()
    end = 0
    for sentence in split_sentences(text):
        start = text.find(sentence, end)  # sentences come in the text's order, stripped
        end = start + len(sentence)
        while start < len(text) and text[start] in "\"'“«([":
            start += 1
        if not HAN_RUN.search(sentence):
            out.add(start)
    return out


def _names(text: str, original: str) -> list[str]:
    """Runs of capitalised words in ``text`` (``original`` with its Chinese blanked out), without a
    sentence's first word unless the text also writes it capitalised inside a sentence."""
    starts = _sentence_starts(original)
    runs = [(m.start(), m.group()) for m in _NAME.finditer(text)]
    inside = {word for start, run in runs for word in run.split(" ")[start in starts :]}
    written = set(WORD.findall(text))
    found = []
    for start, run in runs:
        first, *rest = run.split(" ")
        # An opening word alone ("Anything new?") or one the text also writes in lower case
        # ("Seeing Caroline", "seeing") is taken for a common word; "Иван Петров" keeps its name.
        doubtful = start in starts and first not in inside and (not rest or first.lower() in written)
        if first in _STOP_CAPS or doubtful:
            run = " ".join(rest)
        if run and run not in _STOP_CAPS and len(run) > 1:
            found.append(run)
    return found


def _chinese(text: str) -> tuple[list[str], str]:
    """Chinese entities of ``text``, and ``text`` with its Chinese characters blanked out, for the
    Latin and Cyrillic patterns (offsets kept, so sentence starts still line up)."""
    found: list[str] = []
    for pattern in _CHINESE_PATTERNS:
        for match in pattern.finditer(text):
            found.append(match.group())
            text = text[: match.start()] + " " * len(match.group()) + text[match.end() :]
    for run in HAN_RUN.finditer(text):
        found.extend(
            word
            for word, tag in chinese_tagged(run.group())
            if tag.startswith(_CHINESE_PROPER) and len(word) > 1
        )
    return found, HAN_RUN.sub(lambda m: " " * len(m.group()), text)


def extract_entities(text: str, limit: int = 60) -> list[str]:
    original = text
    found, text = _chinese(text) if HAN_RUN.search(text) else ([], text)
    for pattern in _PATTERNS:
        for match in pattern.finditer(text):
            value = match.group(1) if match.groups() else match.group(0)
            value = value.strip()
            if value.replace(".", "").replace(",", "").isdigit() and len(value) < 2:
                continue  # a lone digit is noise
            found.append(value)
    found.extend(_names(text, original))
    return _unique(v[:300] for v in found)[:limit]


def extract_decisions(text: str, limit: int = 20) -> list[str]:
    # Verbatim: a decision keeps its punctuation (compression keeps decisions word for word).
    if not _DECISION_CUES.search(text):  # none in the text, none in a sentence of it: one pass
        return []
    return _unique((s for s in split_sentences(text) if _DECISION_CUES.search(s)), strip=" \t\n")[:limit]


def extract_changes(text: str, limit: int = 20) -> list[str]:
    """The sentences of ``text`` that say a value changed or a choice was made (``_CHANGE_CUES``),
    verbatim: what may make an older memory of the same subject out of date."""
    if not _CHANGE_CUES.search(text):  # none in the text, none in a sentence of it: one pass
        return []
    return _unique((s for s in split_sentences(text) if _CHANGE_CUES.search(s)), strip=" \t\n")[:limit]
