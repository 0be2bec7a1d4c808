"""Time expressions in a query ("last May", "in 2022", "two weeks ago", "on 7 May 2023") as
windows of time, relative to the caller's ``now``.

Search uses them as a boost on the episodes' ``occurred_at`` (``ranking.rerank``), never as a
filter: an agent asking "what did we decide last May?" wants May's episodes first, not the rest
hidden. The phrases are found here with patterns; ``dateparser`` (offline) turns each into a date
and its period (day, week, month, year), which becomes the window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from dateparser.date import DateDataParser

MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December"
    "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec"
)
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d{2}"
_NUMBER = r"\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|a couple of|several"
# A month's name alone must be capitalised ("may" and "march" are verbs too); after a word that
# announces a time ("in may") or beside a day or a year it may be in any case.
_MONTH = rf"(?:{MONTHS})\b"
_month_i = rf"(?i:{MONTHS})\b"
PATTERNS = [
    (r"(?P<date>\d{4}-\d{2}-\d{2})", "date"),
    (rf"(?P<date>{_DAY}\s+(?:of\s+)?{_month_i}\.?,?(?:\s+{_YEAR})?)", "date"),
    (rf"(?P<date>{_month_i}\.?\s+{_DAY}(?:,?\s+{_YEAR})?)(?!\d)", "date"),
    (rf"(?P<date>{_month_i}\.?,?\s+(?:of\s+)?{_YEAR})", "date"),
    (rf"(?i:(?P<last>last|this|past)\s+)(?P<date>{_month_i})", "month"),
    (rf"(?i:\b(?:in|during|since|by|early|late|mid|of|until|before|after)\s+)(?P<date>{_month_i})", "month"),
    # "May I ask...": a capitalised "May" before a pronoun is the verb.
    (rf"(?P<date>{_MONTH}(?<!May)|May\b(?!\s+(?:I|we|you|he|she|they|it|not|be)\b))", "month"),
    (rf"(?P<date>(?i:{_NUMBER})\s+(?i:days?|weeks?|months?|years?)\s+(?i:ago))", "date"),
    (r"(?P<date>(?i:yesterday|today|the day before yesterday))", "date"),
    (r"(?P<date>(?i:(?:last|this|past)\s+(?:week|weekend|month|year)))", "date"),
    (rf"(?P<date>{_YEAR})(?!-\d)", "year"),
    (r"(?P<recent>(?i:recently|lately|these days|the other day))", "recent"),
]
_compiled = [(re.compile(rf"(?<![\w-]){pattern}(?![\w])"), kind) for pattern, kind in PATTERNS]

#: "recently": the last this many days before ``now``.
RECENT = timedelta(days=30)


@dataclass(frozen=True)
class Window:
    """A span of time a query names: [start, end)."""

    phrase: str
    start: datetime
    end: datetime

    @property
    def width(self) -> timedelta:
        return self.end - self.start

    def distance(self, first: datetime, last: datetime) -> timedelta:
        """How far [first, last] lies outside the window (zero when they overlap)."""
        if last < self.start:
            return self.start - last
        if first >= self.end:
            return first - self.end
        return timedelta(0)


@lru_cache(maxsize=8)
def _parser(base: datetime) -> DateDataParser:
    """A parser for dates relative to ``base``, a day's midnight (naive: dateparser compares with it
    as given). Windows are whole days, so one parser serves every request of a day."""
    return DateDataParser(
        languages=["en"],
        settings={"RELATIVE_BASE": base, "PREFER_DATES_FROM": "past", "RETURN_TIME_AS_PERIOD": True},
    )


def windows(text: str, now: datetime) -> list[Window]:
    """The windows of time the query names, relative to ``now`` (past dates preferred: "May" in
    October is this year's May, "last May" in May a year ago). Phrases that overlap a longer one
    already found are not read twice ("7 May 2023" is one date, not a day, a month and a year)."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    taken: list[tuple[int, int]] = []
    found: list[Window] = []
    for pattern, kind in _compiled:
        for match in pattern.finditer(text):
            span = match.span()
            if any(span[0] < end and start < span[1] for start, end in taken):
                continue
            window = _window(match, kind, now)
            if window is not None:
                taken.append(span)
                found.append(window)
    return found


def _window(match: re.Match[str], kind: str, now: datetime) -> Window | None:
    phrase = match.group(0)
    if kind == "recent":
        return Window(phrase, now - RECENT, now)
    fragment = match.group("date")
    parsed = _parser(now.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)).get_date_data(
        fragment
    )
    if parsed.date_obj is None:
        return None
    day = parsed.date_obj.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=UTC)
    period = "month" if kind == "month" else "year" if kind == "year" else (parsed.period or "day")
    if kind == "month" and (match.groupdict().get("last") or "").lower() == "last" and day.month == now.month:
        day = day.replace(year=day.year - 1)  # "last May" said in May: a year ago
    if period == "year":
        start = day.replace(month=1, day=1)
        return Window(phrase, start, start.replace(year=start.year + 1))
    if period == "month":
        start = day.replace(day=1)
        end = (
            start.replace(year=start.year + 1, month=1)
            if start.month == 12
            else start.replace(month=start.month + 1)
        )
        return Window(phrase, start, end)
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return Window(phrase, start, start + timedelta(days=7))
    return Window(phrase, day, day + timedelta(days=1))
