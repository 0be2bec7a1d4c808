"""Time phrases ("last May", "in 2022", "two weeks ago", "yesterday", "в прошлом месяце", "三天前")
as windows of time, relative to a moment: a query's ``now``, or the moment a turn was said.

Search reads a query's phrases (``windows``) and lifts the episodes of those times
(``retrieval.ranking.time_factor``), never as a filter: an agent asking "what did we decide last
May?" wants May's episodes first, not the rest hidden. Ingest reads the relative phrases of each
turn against the turn's own date (``mentioned``): "yesterday I went bowling" said on 17 March
points at 16 March, which the turn's date alone does not say (docs/decisions/0042-time-at-the-turn.md).

The phrases are found with the patterns of ``episodes.time_phrases``, and each becomes a date and its period (day, week, month,
year), which becomes the window. Relative phrases ("yesterday", "three weeks ago", "last month",
"next Friday", and their Russian and Chinese forms) are counts from the moment, read here in every
language; a turn's reading never needs more, so ingest stays cheap. English dates and months
("7 May 2023", "in June") are read by ``dateparser`` (offline, on a query only); the Russian and
Chinese ones ("15 декабря", "в мае", "5月7日", "去年五月") are read here, since dateparser misses
many of them ("в мае", "5月7日" and "三天前" give nothing) and each names its date and period plainly.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING

from .time_phrases import (
    COMPILED,
    COUNTED,
    CUES,
    DAYS_BACK,
    EN_NUMBERS,
    LOOSE,
    PARSED,
    RELATIVE,
    RU_MONTH_NUMBER,
    RU_NUMBERS,
    SCRIPTS,
    WEEKDAYS,
    ZH_DIGITS,
    ZH_YEARS,
)

if TYPE_CHECKING:
    from dateparser.date import DateDataParser


#: A match's named groups, and what a phrase reads as: a date and its period.
Groups = Mapping[str, str | None]
Read = tuple[datetime, str]

#: "recently": the last this many days before ``now``.
RECENT = timedelta(days=30)


@dataclass(frozen=True)
class Window:
    """A span of time a text names: [start, end)."""

    phrase: str
    start: datetime
    end: datetime
    #: Read from a count or a word that may be loose ("recently", "a few days ago"): its edges
    #: are soft, where a named day, month or year has exact ones (``retrieval.ranking``).
    loose: bool = False

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

    def share_inside(self, other: Window) -> float:
        """The share of ``other`` that lies inside this window (1 when it lies wholly inside)."""
        inside = min(self.end, other.end) - max(self.start, other.start)
        return max(inside / other.width, 0.0) if other.width else 0.0


def windows(text: str, now: datetime) -> list[Window]:
    """The windows of time a query names, relative to ``now`` (past dates preferred: "May" in
    October is this year's May, "last May" in May a year ago)."""
    return _read(text, now, None)


def mentioned(text: str, said_at: datetime) -> list[Window]:
    """The windows a turn's relative phrases point at, read against ``said_at``, the moment it was
    said ("yesterday" said on 17 March: 16 March). A window that holds the day it was said is
    left out: the turn's own date says as much."""
    day = _midnight(said_at)
    return [w for w in _read(text, said_at, RELATIVE) if not w.start <= day < w.end]


# A turn's windows are kept as text (``Turn.mentioned``, ``Episode.mentioned``): an ISO date for a
# day, "start/end" (both days included, as ISO 8601 writes an interval) for a longer window.
MENTION_PATTERN = r"\d{4}-\d{2}-\d{2}(?:/\d{4}-\d{2}-\d{2})?"
MENTION_LENGTH = 21


def mention_text(window: Window) -> str:
    first, last = window.start.date(), (window.end - timedelta(days=1)).date()
    return first.isoformat() if first == last else f"{first.isoformat()}/{last.isoformat()}"


_MENTION = re.compile(MENTION_PATTERN)


def mention_window(text: str) -> Window:
    """A kept window back (ValueError for a text that is not one)."""
    if not _MENTION.fullmatch(text):
        raise ValueError(f"not a day or a span of days: {text!r}")
    first, _, last = text.partition("/")
    start = datetime.combine(date.fromisoformat(first), datetime.min.time(), UTC)
    end = datetime.combine(date.fromisoformat(last or first), datetime.min.time(), UTC)
    if end < start:
        raise ValueError(f"a span of days that ends before it starts: {text!r}")
    return Window(text, start, end + timedelta(days=1))


def _midnight(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=UTC)


def _read(text: str, now: datetime, kinds: Collection[str] | None) -> list[Window]:
    """The windows of the phrases of ``kinds`` (None: every kind) in ``text``, in the text's order.
    Phrases that overlap a longer one already found are not read twice ("7 May 2023" is one date,
    not a day, a month and a year).

    A phrase that counts from the moment counts from the end of the first time the text names
    instead, when that is earlier: "last Friday, on 23 January 2022" is the Friday before the
    23rd, and "recently, as mentioned on 3 June" the month before 3 June."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    taken: list[tuple[int, int]] = []
    found: list[tuple[tuple[int, int], Window]] = []
    counted: list[tuple[re.Match[str], str, str]] = []
    written = {"en"} | {language for language, has in SCRIPTS.items() if has(text)}
    lowered = text.lower()
    for pattern, kind, language in COMPILED:
        if language not in written or (kinds is not None and kind not in kinds):
            continue
        if language == "en" and not any(cue in lowered for cue in CUES.get(kind, ("",))):
            continue
        for match in pattern.finditer(text):
            span = match.span()
            if any(span[0] < end and start < span[1] for start, end in taken):
                continue
            if kind in COUNTED:
                taken.append(span)
                counted.append((match, kind, language))
                continue
            window = _window(match, kind, language, now)
            if window is not None:
                taken.append(span)
                found.append((span, window))
    named = min(found, key=lambda f: f[0])[1].end - timedelta(microseconds=1) if found else now
    for match, kind, language in counted:
        window = _window(match, kind, language, min(now, named))
        if window is not None:
            found.append((match.span(), window))
    return _spans(text, sorted(found, key=lambda f: f[0]))


#: "between A and B", "from A to B", "с A по B", "从A到B": two named times and the span between
#: them, edges included. Written between the two phrases, and just before the first.
_SPAN_JOIN = re.compile(r"\s*(?:and|to|until|till|through|-|–|—|по|до|到|至)\s*", re.IGNORECASE)
_SPAN_OPEN = re.compile(r"(?:\bbetween|\bfrom|(?<!\w)с|(?<!\w)от|从|自)\s*$", re.IGNORECASE)


def _spans(text: str, found: Sequence[tuple[tuple[int, int], Window]]) -> list[Window]:
    """The windows in the text's order, two that a text names as the edges of a span ("between
    August 11 and August 15 2023") read as one window from the first's start to the second's end
    (exact when both are)."""
    out: list[Window] = []
    i = 0
    while i < len(found):
        (start, end), window = found[i]
        if i + 1 < len(found):
            (after_start, after_end), after = found[i + 1]
            if (
                _SPAN_OPEN.search(text[:start])
                and _SPAN_JOIN.fullmatch(text[end:after_start])
                and window.start < after.end
            ):
                out.append(
                    Window(text[start:after_end], window.start, after.end, loose=window.loose or after.loose)
                )
                i += 2
                continue
        out.append(window)
        i += 1
    return out


def _window(match: re.Match[str], kind: str, language: str, now: datetime) -> Window | None:
    phrase = match.group(0)
    if kind == "recent":
        return Window(phrase, now - RECENT, now, loose=True)
    today = _midnight(now)
    try:
        if language == "en" and kind in PARSED:
            read = _parsed(match, kind, today)
        else:
            read = _READ[kind](match.groupdict(), language, today)
    except (KeyError, ValueError):  # no such date: "2月30日", "13月", "一二三月"
        return None
    if read is None:
        return None
    return dataclasses.replace(_span(phrase, *read), loose=kind in LOOSE)


def load_date_parser() -> None:
    """Import dateparser now (a server's warm-up), not in the first query that names a date."""
    import dateparser.date  # noqa: F401 - the import is the point


@lru_cache(maxsize=8)
def _parser(base: datetime) -> DateDataParser:
    """A parser for dates relative to ``base``, a day's midnight (naive: dateparser compares with it
    as given). Windows are whole days, so one parser serves every request of a day. Imported on
    first use: only a query's English dates need it."""
    from dateparser.date import DateDataParser

    return DateDataParser(
        languages=["en"],
        settings={"RELATIVE_BASE": base, "PREFER_DATES_FROM": "past", "RETURN_TIME_AS_PERIOD": True},
    )


def _parsed(match: re.Match[str], kind: str, today: datetime) -> Read | None:
    """An English date or month's date and period, as dateparser reads it."""
    parsed = _parser(today.replace(tzinfo=None)).get_date_data(match.group("date"))
    if parsed.date_obj is None:
        return None
    day = parsed.date_obj.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=UTC)
    period = "month" if kind == "month" else (parsed.period or "day")
    if (
        kind == "month"
        and (match.groupdict().get("last") or "").lower() == "last"
        and day.month == today.month
    ):
        day = day.replace(year=day.year - 1)  # "last May" said in May: a year ago
    return day, period


def _span(phrase: str, day: datetime, period: str) -> Window:
    """The window of the ``period`` (day, week from Monday, its weekend, month, year) that holds
    ``day``."""
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
    if period in ("week", "weekend"):
        start = day - timedelta(days=day.weekday())
        if period == "weekend":
            return Window(phrase, start + timedelta(days=5), start + timedelta(days=7))
        return Window(phrase, start, start + timedelta(days=7))
    return Window(phrase, day, day + timedelta(days=1))


# Phrases read from their parts: each reader gets the match's groups, the language and today's
# midnight, and gives a date and its period (KeyError or ValueError for an impossible one).

_UNITS = {
    "d": "day", "w": "week", "m": "month", "y": "year",
    "д": "day", "н": "week", "м": "month", "г": "year", "л": "year",
    "天": "day", "日": "day", "周": "week", "星": "week", "礼": "week", "月": "month", "年": "year",
}  # fmt: skip
#: How far back "last" reaches: one period, позапрошлый/上上/前年 two; "next" one ahead.
_BACK = {
    "last": 1, "past": 1, "next": -1,
    "позапрошл": 2, "прошл": 1, "следующ": -1,
    "上上": 2, "上": 1, "下": -1, "去年": 1, "前年": 2, "明年": -1,
}  # fmt: skip


def _back(which: str | None) -> int:
    return next((n for prefix, n in _BACK.items() if (which or "").lower().startswith(prefix)), 0)


def _unit(text: str) -> str:
    """A period by its name in any language: "weeks", "недели", "星期" (a weekend is its own)."""
    return "weekend" if text.lower() == "weekend" else _UNITS[text[0].lower()]


def _number(text: str | None, language: str) -> int:
    """A count or a day of the month: digits, a word ("two", "две") or Chinese numerals ("十一");
    KeyError for numerals that make no number ("一二三")."""
    if not text:
        return 1
    if text.isdigit():
        return int(text)
    if language == "en":
        return EN_NUMBERS[" ".join(text.lower().split())]
    if language == "ru":
        return RU_NUMBERS[text.lower()]
    if text == "几":  # "a few"
        return 3
    tens, ten, units = text.partition("十")
    if not ten:
        return ZH_DIGITS[text]
    return (ZH_DIGITS[tens] if tens else 1) * 10 + (ZH_DIGITS[units] if units else 0)


def _month(text: str, language: str) -> int:
    if language == "ru" and not text.isdigit():
        return next(n for n, name in enumerate(RU_MONTH_NUMBER, 1) if name.fullmatch(text.lower()))
    return _number(text, language)


def _year(groups: Groups, today: datetime) -> int | None:
    """The year a phrase names: written out, or 去年/今年/前年/明年 (None when it names none)."""
    if groups.get("year"):
        return int(groups["year"] or 0)
    if groups.get("which") in ZH_YEARS:
        return today.year - _back(groups["which"])
    return None


def _read_day(groups: Groups, language: str, today: datetime) -> Read:
    """A day ("15 декабря", "15.12.2023", "5月7日"), in the last year that has it by today."""
    year = _year(groups, today)
    month, number = _month(groups["month"] or "", language), _number(groups["day"], language)
    day = today.replace(year=year or today.year, month=month, day=number)
    if year is None and day > today:
        day = day.replace(year=today.year - 1)
    return day, "day"


def _read_month(groups: Groups, language: str, today: datetime) -> Read:
    """A month ("в мае", "мая 2023", "в прошлом мае", "八月份", "去年五月"): the last such month
    by today ("в прошлом мае" said in May: a year ago, as "last May")."""
    month = _month(groups["month"] or "", language)
    year = _year(groups, today)
    if year is None:
        year = today.year if month <= today.month else today.year - 1
        back = _back(groups.get("which"))
        if back and month == today.month:
            year -= 1
        year -= max(back - 1, 0)
    return today.replace(year=year, month=month, day=1), "month"


def _read_ago(groups: Groups, language: str, today: datetime) -> Read:
    """A count back ("two weeks ago", "три дня назад", "3个月前"): the day that far back, in its
    period."""
    n, unit = _number(groups.get("n"), language), _unit(groups["unit"] or "")
    return _shifted(today, unit, -n), unit


def _read_this(groups: Groups, language: str, today: datetime) -> Read:
    """This period, an earlier or the next one ("last week", "next month", "на прошлой неделе",
    "в этом году", "上个月", "本周", "去年")."""
    which = groups["which"] or ""
    unit = _unit(groups.get("unit") or which[-1])  # 去年: the year
    return _shifted(today, "week" if unit == "weekend" else unit, -_back(which)), unit


def _read_days(groups: Groups, language: str, today: datetime) -> Read:
    """A day counted from today: "yesterday", "позавчера", "明天"."""
    return today - timedelta(days=DAYS_BACK[" ".join((groups["days"] or "").lower().split())]), "day"


def _read_weekday(groups: Groups, language: str, today: datetime) -> Read:
    """A day of the week: "last Friday" is the latest Friday before today, "next Friday" the first
    after it, "this Friday" this week's."""
    weekday, which = WEEKDAYS.index((groups["weekday"] or "").lower()), _back(groups["which"])
    if which > 0:
        return today - timedelta(days=(today.weekday() - weekday) % 7 or 7), "day"
    if which < 0:
        return today + timedelta(days=(weekday - today.weekday()) % 7 or 7), "day"
    return today + timedelta(days=weekday - today.weekday()), "day"


def _read_year(groups: Groups, language: str, today: datetime) -> Read:
    return today.replace(year=int(groups["year"] or 0), month=1, day=1), "year"


def _shifted(today: datetime, unit: str, by: int) -> datetime:
    """A day ``by`` days, weeks, months or years from today (a month or a year: its first day)."""
    if unit == "day":
        return today + timedelta(days=by)
    if unit == "week":
        return today + timedelta(weeks=by)
    if unit == "month":
        months = today.year * 12 + today.month - 1 + by
        return today.replace(year=months // 12, month=months % 12 + 1, day=1)
    return today.replace(year=today.year + by, month=1, day=1)


_READ: dict[str, Callable[[Groups, str, datetime], Read]] = {
    "day": _read_day,
    "month": _read_month,
    "ago": _read_ago,
    "this": _read_this,
    "days": _read_days,
    "weekday": _read_weekday,
    "year": _read_year,
}
