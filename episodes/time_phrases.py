"""Which words name a time, in English, Russian and Chinese: the patterns ``episodes.when`` finds
a text's time phrases with, each tagged with its kind ("date", "month", "ago", "days", "this",
"weekday", "year", "recent", "day"), and the words its readers turn into numbers (months, counts,
"yesterday" and its kin). How a phrase becomes a window of time is ``episodes.when``'s."""

from __future__ import annotations

import re

from .language import has_cyrillic, has_han

MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December"
    "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec"
)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d{2}"
EN_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a few": 3, "a couple of": 2,
    "several": 3,
}  # fmt: skip
_NUMBER = rf"\d+|{'|'.join(sorted(EN_NUMBERS, key=len, reverse=True))}"
# A month's name alone must be capitalised ("may" and "march" are verbs too); after a word that
# announces a time ("in may") or beside a day or a year it may be in any case.
_MONTH = rf"(?:{MONTHS})\b"
_month_i = rf"(?i:{MONTHS})\b"
#: "yesterday" and its kin: how many days back (negative: ahead), in each language.
DAYS_BACK = {
    "the day before yesterday": 2, "yesterday": 1, "today": 0, "tomorrow": -1, "the day after tomorrow": -2,
    "позавчера": 2, "вчера": 1, "сегодня": 0, "завтра": -1, "послезавтра": -2,
    "前天": 2, "昨天": 1, "昨日": 1, "今天": 0, "今日": 0, "明天": -1,
}  # fmt: skip
_EN_DAYS = "|".join(sorted((d for d in DAYS_BACK if d.isascii()), key=len, reverse=True))
PATTERNS = [
    (r"(?P<date>\d{4}-\d{2}-\d{2})", "date"),
    (rf"(?P<date>{_DAY}\s+(?:of\s+)?{_month_i}\.?,?(?:\s+{_YEAR})?)", "date"),
    (rf"(?P<date>{_month_i}\.?\s+{_DAY}(?:,?\s+{_YEAR})?)(?!\d)", "date"),
    (rf"(?P<date>{_month_i}\.?,?\s+(?:of\s+)?{_YEAR})", "date"),
    (rf"(?i:(?P<last>last|this|past)\s+)(?P<date>{_month_i})", "month"),
    (rf"(?i:\b(?:in|during|since|by|early|late|mid|of|until|before|after)\s+)(?P<date>{_month_i})", "month"),
    # "May I ask...": a capitalised "May" before a pronoun is the verb.
    (rf"(?P<date>{_MONTH}(?<!May)|May\b(?!\s+(?:I|we|you|he|she|they|it|not|be)\b))", "month"),
    (rf"(?i:(?P<n>{_NUMBER})\s+(?P<unit>days?|weeks?|months?|years?)\s+ago)", "ago"),
    (rf"(?i:(?P<days>{_EN_DAYS}))", "days"),
    (r"(?i:(?P<which>last|this|past|next)\s+(?P<unit>week(?:end)?|month|year))", "this"),
    (rf"(?i:(?P<which>last|this|next)\s+(?P<weekday>{'|'.join(WEEKDAYS)}))", "weekday"),
    (rf"(?P<year>{_YEAR})(?!-\d)", "year"),
    (r"(?P<recent>(?i:recently|lately|these days|the other day))", "recent"),
]

# Russian: month names in their cases ("май", "мая", "мае"), numbers in words, units in any case.
# A month's name alone must be in lower case ("Марта" is a name too).
_RU_MONTHS = (
    "январ[ьяе]", "феврал[ьяе]", "март[ае]?", "апрел[ьяе]", "ма[йяе]", "июн[ьяе]", "июл[ьяе]",
    "август[ае]?", "сентябр[ьяе]", "октябр[ьяе]", "ноябр[ьяе]", "декабр[ьяе]",
)  # fmt: skip
_RU_MONTH = rf"(?P<month>{'|'.join(_RU_MONTHS)})"
RU_MONTH_NUMBER = [re.compile(name) for name in _RU_MONTHS]
RU_NUMBERS = {
    "один": 1, "одна": 1, "одну": 1, "пару": 2, "пара": 2, "два": 2, "две": 2, "три": 3, "четыре": 4,
    "пять": 5, "шесть": 6, "семь": 7, "восемь": 8, "девять": 9, "десять": 10, "несколько": 3,
}  # fmt: skip
_RU_NUMBER = rf"\d+|{'|'.join(RU_NUMBERS)}"
_RU_UNIT = r"(?P<unit>дн(?:я|ей)|день|недел[юиь]|месяц(?:а|ев)?|год(?:а)?|лет)"
#: "last" and "this": прошлый, позапрошлый, этот, текущий in any case.
_RU_LAST_THIS = r"позапрошл\w*|прошл\w*|эт(?:от|ом|ой|у|а|и)|текущ\w*"
_RU_WHICH = rf"(?P<which>{_RU_LAST_THIS})"
#: ... and "next" (следующий), for a period: "next May" is not read in any language.
_RU_WHICH_PERIOD = rf"(?P<which>{_RU_LAST_THIS}|следующ\w*)"
_RU_DAYS = "|".join(d for d in DAYS_BACK if has_cyrillic(d))
RU_PATTERNS = [
    (rf"(?P<day>\d{{1,2}})\s+(?i:{_RU_MONTH})(?:\s+(?P<year>{_YEAR}))?", "day"),
    (rf"(?P<day>\d{{1,2}})\.(?P<month>\d{{1,2}})\.(?P<year>{_YEAR})", "day"),
    (rf"(?i:{_RU_MONTH})\s+(?P<year>{_YEAR})", "month"),
    (rf"(?i:{_RU_WHICH}\s+{_RU_MONTH})", "month"),
    (_RU_MONTH, "month"),
    (rf"(?i:(?:(?P<n>{_RU_NUMBER})\s+)?{_RU_UNIT}\s+назад)", "ago"),
    (rf"(?i:{_RU_WHICH_PERIOD}\s+(?P<unit>недел[юиье]|месяц[еа]?|год[уа]?))", "this"),
    (rf"(?i:(?P<days>{_RU_DAYS}))", "days"),
    (r"(?P<recent>(?i:недавно|на днях|в последнее время))", "recent"),
]

# Chinese: written without spaces, so its phrases are found anywhere but inside a number.
ZH_DIGITS = dict(zip("〇零一二两三四五六七八九", (0, 0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9), strict=True))
_ZH_NUMBER = r"\d{1,2}|[一二两三四五六七八九十]{1,3}"
#: The years Chinese names by where they stand: the one before last, last, this, next.
ZH_YEARS = ("前年", "去年", "今年", "明年")
_ZH_YEAR = rf"(?:(?P<year>(?:19|20)\d{{2}})年|(?P<which>{'|'.join(ZH_YEARS)}))"
_ZH_DAYS = "|".join(d for d in DAYS_BACK if has_han(d))
ZH_PATTERNS = [
    (rf"{_ZH_YEAR}?(?P<month>{_ZH_NUMBER})月(?P<day>{_ZH_NUMBER})[日号]", "day"),
    (rf"{_ZH_YEAR}?(?P<month>{_ZH_NUMBER})月份?", "month"),
    (rf"(?P<n>{_ZH_NUMBER}|几)个?(?P<unit>天|日|周|星期|礼拜|月|年)以?前", "ago"),
    # 下 is "next" but also "a little" in 一下 and "below" in 以下: "讨论一下周末的计划".
    (r"(?P<which>上上|上|(?<![一以])下|这|本)个?(?P<unit>周|星期|礼拜|月)", "this"),
    (rf"(?P<which>{'|'.join(ZH_YEARS)})", "this"),
    (r"(?P<year>(?:19|20)\d{2})年", "year"),
    (rf"(?P<days>{_ZH_DAYS})", "days"),
    (r"(?P<recent>最近|近来|这几天|前几天)", "recent"),
]

#: Russian and Chinese patterns are tried only on a text that has their script.
SCRIPTS = {"ru": has_cyrillic, "zh": has_han}
COMPILED = (
    # Russian and Chinese first: "15 декабря 2023" is a day, not the year the English patterns see.
    [(re.compile(rf"(?<![\w-]){pattern}(?![\w])"), kind, "ru") for pattern, kind in RU_PATTERNS]
    + [(re.compile(rf"(?<!\d){pattern}(?!\d)"), kind, "zh") for pattern, kind in ZH_PATTERNS]
    + [(re.compile(rf"(?<![\w-]){pattern}(?![\w])"), kind, "en") for pattern, kind in PATTERNS]
)

#: What a turn's reading keeps: counts from the moment it was said. A date or a month it names
#: needs dateparser or a guess of the year, and "recently" is a month wide.
RELATIVE = frozenset({"ago", "this", "days", "weekday"})

#: Words without one of which an English phrase of a kind cannot be there: a turn without them
#: is not searched for it (most turns name no time, and ingest reads every turn).
CUES = {
    "ago": ("ago",),
    "days": ("yesterday", "today", "tomorrow"),
    "this": ("week", "month", "year"),
    "weekday": ("day",),
}

#: The English kinds dateparser reads; every other kind is read from its parts (``_READ``).
PARSED = frozenset({"date", "month"})
#: Counts that may be loose ("a few days ago"), and "recently".
LOOSE = frozenset({"ago", "recent"})

#: What counts from a moment (the rest names its time).
COUNTED = RELATIVE | {"recent"}
