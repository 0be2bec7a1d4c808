"""Entities and decisions, extracted offline and deterministically (DESIGN §6).

Used at ingest (stored on the episode) and by the summarisers, which keep both lists verbatim in
the warm shape so nothing named or decided is lost by compression (seed 003 F3).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December|"
    "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
_PATTERNS = [
    re.compile(r"https?://[^\s<>\"')\]]+"),
    re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b"),
    re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b"),
    re.compile(rf"\b\d{{1,2}} (?:{_MONTHS}),? \d{{4}}\b"),
    re.compile(rf"\b(?:{_MONTHS}) \d{{1,2}}(?:st|nd|rd|th)?(?:,? \d{{4}})?\b"),
    re.compile(rf"\b(?:{_MONTHS}) \d{{4}}\b"),
    re.compile(r"`([^`\n]{1,80})`"),
    re.compile(r"\b[A-Z][A-Z0-9]{1,9}s?\b"),  # acronyms: LGBTQ, API, NASA
    re.compile(r"[\"“«]([^\"”»\n]{2,80})[\"”»]"),
    re.compile(r"\b[a-z]+(?:_[a-z0-9]+)+\b"),  # snake_case
    re.compile(r"\b[a-z]+(?:[A-Z][a-z0-9]+)+\b"),  # camelCase
    re.compile(r"\b[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*){1,}\(\)?"),  # dotted.calls()
    re.compile(
        r"(?<![\w.])[$€£]?\d+(?:[.,]\d+)*(?:\s?(?:%|km|kg|ms|GB|MB|k|m|h|years?|days?|hours?|minutes?))?"
    ),
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
    r"|(?:решил|решили|решено|договорились|будем|выбрали|согласовали)"
    r"|(?:决定|同意|我们将|选择了|确定了|定下)",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])|\n+")


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


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


def extract_entities(text: str, limit: int = 60) -> list[str]:
    found: list[str] = []
    for pattern in _PATTERNS:
        for match in pattern.finditer(text):
            value = match.group(1) if match.groups() else match.group(0)
            value = value.strip()
            if value.replace(".", "").replace(",", "").isdigit() and len(value) < 2:
                continue  # a lone digit is noise
            found.append(value)
    for match in _NAME.finditer(text):
        words = match.group(0)
        first, *rest = words.split(" ")
        if first in _STOP_CAPS:
            words = " ".join(rest)
        if words and words not in _STOP_CAPS and len(words) > 1:
            found.append(words)
    return _unique(v[:300] for v in found)[:limit]


def extract_decisions(text: str, limit: int = 20) -> list[str]:
    # Verbatim: a decision keeps its punctuation (seed 003 F3).
    return _unique((s for s in split_sentences(text) if _DECISION_CUES.search(s)), strip=" \t\n")[:limit]
