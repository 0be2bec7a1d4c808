"""Time expressions in a query ("last May", "in 2022", "two weeks ago", "on 7 May 2023") as
windows of time, relative to the caller's ``now``.

Search uses them as a boost on the episodes' ``occurred_at`` (``ranking.rerank``), never as a
filter: an agent asking "what did we decide last May?" wants May's episodes first, not the rest
hidden. The phrases are found here with patterns, and each becomes a date and its period (day,
week, month, year), which becomes the window: ``dateparser`` (offline) reads the English ones, and
the Russian and Chinese ones ("в прошлом месяце", "15 декабря", "三天前", "去年五月") are read here,
since dateparser misses many of them ("в мае", "5月7日" and "三天前" give nothing) and each names
its date and period plainly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from dateparser.date import DateDataParser

from episodes.language import has_cyrillic, has_han

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

# Russian: month names in their cases ("май", "мая", "мае"), numbers in words, units in any case.
# A month's name alone must be in lower case ("Марта" is a name too).
_RU_MONTHS = (
    "январ[ьяе]", "феврал[ьяе]", "март[ае]?", "апрел[ьяе]", "ма[йяе]", "июн[ьяе]", "июл[ьяе]",
    "август[ае]?", "сентябр[ьяе]", "октябр[ьяе]", "ноябр[ьяе]", "декабр[ьяе]",
)  # fmt: skip
_RU_MONTH = rf"(?P<month>{'|'.join(_RU_MONTHS)})"
_RU_MONTH_NUMBER = [re.compile(name) for name in _RU_MONTHS]
_RU_NUMBERS = {
    "один": 1, "одна": 1, "одну": 1, "пару": 2, "пара": 2, "два": 2, "две": 2, "три": 3, "четыре": 4,
    "пять": 5, "шесть": 6, "семь": 7, "восемь": 8, "девять": 9, "десять": 10, "несколько": 3,
}  # fmt: skip
_RU_NUMBER = rf"\d+|{'|'.join(_RU_NUMBERS)}"
_RU_UNIT = r"(?P<unit>дн(?:я|ей)|день|недел[юиь]|месяц(?:а|ев)?|год(?:а)?|лет)"
#: "last" and "this": прошлый, позапрошлый, этот, текущий in any case.
_RU_WHICH = r"(?P<which>позапрошл\w*|прошл\w*|эт(?:от|ом|ой|у|а|и)|текущ\w*)"
RU_PATTERNS = [
    (rf"(?P<day>\d{{1,2}})\s+(?i:{_RU_MONTH})(?:\s+(?P<year>{_YEAR}))?", "day"),
    (rf"(?P<day>\d{{1,2}})\.(?P<month>\d{{1,2}})\.(?P<year>{_YEAR})", "day"),
    (rf"(?i:{_RU_MONTH})\s+(?P<year>{_YEAR})", "month"),
    (rf"(?i:{_RU_WHICH}\s+{_RU_MONTH})", "month"),
    (_RU_MONTH, "month"),
    (rf"(?i:(?:(?P<n>{_RU_NUMBER})\s+)?{_RU_UNIT}\s+назад)", "ago"),
    (rf"(?i:{_RU_WHICH}\s+(?P<unit>недел[юиье]|месяц[еа]?|год[уа]?))", "this"),
    (r"(?i:(?P<days>позавчера|вчера|сегодня))", "days"),
    (r"(?P<recent>(?i:недавно|на днях|в последнее время))", "recent"),
]

# Chinese: written without spaces, so its phrases are found anywhere but inside a number.
_ZH_DIGITS = dict(zip("〇零一二两三四五六七八九", (0, 0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9), strict=True))
_ZH_NUMBER = r"\d{1,2}|[一二两三四五六七八九十]{1,3}"
#: The years Chinese names by where they stand: the one before last, last, this.
_ZH_YEARS = ("前年", "去年", "今年")
_ZH_YEAR = rf"(?:(?P<year>(?:19|20)\d{{2}})年|(?P<which>{'|'.join(_ZH_YEARS)}))"
ZH_PATTERNS = [
    (rf"{_ZH_YEAR}?(?P<month>{_ZH_NUMBER})月(?P<day>{_ZH_NUMBER})[日号]", "day"),
    (rf"{_ZH_YEAR}?(?P<month>{_ZH_NUMBER})月份?", "month"),
    (rf"(?P<n>{_ZH_NUMBER}|几)个?(?P<unit>天|日|周|星期|礼拜|月|年)以?前", "ago"),
    (r"(?P<which>上上|上|这|本)个?(?P<unit>周|星期|礼拜|月)", "this"),
    (rf"(?P<which>{'|'.join(_ZH_YEARS)})", "this"),
    (r"(?P<year>(?:19|20)\d{2})年", "year"),
    (r"(?P<days>前天|昨天|昨日|今天|今日)", "days"),
    (r"(?P<recent>最近|近来|这几天|前几天)", "recent"),
]

#: Russian and Chinese patterns are tried only on a text that has their script.
_SCRIPTS = {"ru": has_cyrillic, "zh": has_han}
_compiled = (
    # Russian and Chinese first: "15 декабря 2023" is a day, not the year the English patterns see.
    [(re.compile(rf"(?<![\w-]){pattern}(?![\w])"), kind, "ru") for pattern, kind in RU_PATTERNS]
    + [(re.compile(rf"(?<!\d){pattern}(?!\d)"), kind, "zh") for pattern, kind in ZH_PATTERNS]
    + [(re.compile(rf"(?<![\w-]){pattern}(?![\w])"), kind, "en") for pattern, kind in PATTERNS]
)

#: A match's named groups, and what a phrase reads as: a date and its period.
Groups = Mapping[str, str | None]
Read = tuple[datetime, str]

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
    written = {"en"} | {language for language, has in _SCRIPTS.items() if has(text)}
    for pattern, kind, language in _compiled:
        if language not in written:
            continue
        for match in pattern.finditer(text):
            span = match.span()
            if any(span[0] < end and start < span[1] for start, end in taken):
                continue
            window = _window(match, kind, language, now)
            if window is not None:
                taken.append(span)
                found.append(window)
    return found


def _window(match: re.Match[str], kind: str, language: str, now: datetime) -> Window | None:
    phrase = match.group(0)
    if kind == "recent":
        return Window(phrase, now - RECENT, now)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=UTC)
    try:
        if language == "en":
            read = _parsed(match, kind, today)
        else:
            read = _READ[kind](match.groupdict(), language, today)
    except (KeyError, ValueError):  # no such date: "2月30日", "13月", "一二三月"
        return None
    return None if read is None else _span(phrase, *read)


def _parsed(match: re.Match[str], kind: str, today: datetime) -> Read | None:
    """An English phrase's date and period, as dateparser reads it."""
    parsed = _parser(today.replace(tzinfo=None)).get_date_data(match.group("date"))
    if parsed.date_obj is None:
        return None
    day = parsed.date_obj.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=UTC)
    period = "month" if kind == "month" else "year" if kind == "year" else (parsed.period or "day")
    if (
        kind == "month"
        and (match.groupdict().get("last") or "").lower() == "last"
        and day.month == today.month
    ):
        day = day.replace(year=day.year - 1)  # "last May" said in May: a year ago
    return day, period


def _span(phrase: str, day: datetime, period: str) -> Window:
    """The window of the ``period`` (day, week from Monday, month, year) that holds ``day``."""
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


# Russian and Chinese phrases, read from their parts: each reader gets the match's groups, the
# language and today's midnight, and gives a date and its period (KeyError or ValueError for an
# impossible one).

_UNITS = {
    "д": "day", "н": "week", "м": "month", "г": "year", "л": "year",
    "天": "day", "日": "day", "周": "week", "星": "week", "礼": "week", "月": "month", "年": "year",
}  # fmt: skip
#: How far back "last" reaches: прошлый/上/去年 one period, позапрошлый/上上/前年 two.
_BACK = {"позапрошл": 2, "прошл": 1, "上上": 2, "上": 1, "去年": 1, "前年": 2}


def _back(which: str | None) -> int:
    return next((n for prefix, n in _BACK.items() if (which or "").lower().startswith(prefix)), 0)


def _number(text: str | None, language: str) -> int:
    """A count or a day of the month: digits, a Russian word ("две") or Chinese numerals ("十一");
    KeyError for numerals that make no number ("一二三")."""
    if not text:
        return 1
    if text.isdigit():
        return int(text)
    if language == "ru":
        return _RU_NUMBERS[text.lower()]
    if text == "几":  # "a few"
        return 3
    tens, ten, units = text.partition("十")
    if not ten:
        return _ZH_DIGITS[text]
    return (_ZH_DIGITS[tens] if tens else 1) * 10 + (_ZH_DIGITS[units] if units else 0)


def _month(text: str, language: str) -> int:
    if language == "ru" and not text.isdigit():
        return next(n for n, name in enumerate(_RU_MONTH_NUMBER, 1) if name.fullmatch(text.lower()))
    return _number(text, language)


def _year(groups: Groups, today: datetime) -> int | None:
    """The year a phrase names: written out, or 去年/今年/前年 (None when it names none)."""
    if groups.get("year"):
        return int(groups["year"] or 0)
    if groups.get("which") in _ZH_YEARS:
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
    """A count back ("три дня назад", "две недели назад", "3个月前"): the day that far back, in
    its period."""
    n, unit = _number(groups.get("n"), language), _UNITS[(groups["unit"] or "")[0].lower()]
    return _shifted(today, unit, -n), unit


def _read_this(groups: Groups, language: str, today: datetime) -> Read:
    """This period or an earlier one ("на прошлой неделе", "в этом году", "上个月", "本周", "去年")."""
    which = groups["which"] or ""
    unit = _UNITS[(groups.get("unit") or which[-1]).lower()[0]]  # 去年: the year
    return _shifted(today, unit, -_back(groups["which"])), unit


def _read_days(groups: Groups, language: str, today: datetime) -> Read:
    back = {"позавчера": 2, "вчера": 1, "前天": 2, "昨天": 1, "昨日": 1}.get(
        (groups["days"] or "").lower(), 0
    )
    return today - timedelta(days=back), "day"


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
    "year": _read_year,
}
