"""Time-aware search (docs/decisions/0019): a time the query names lifts the episodes of that time,
relative to the caller's now; it never hides the others."""

from datetime import UTC, datetime

import pytest
from django.utils import timezone

from episodes import when

from .test_search import turns

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime(2023, 10, 20, 15, 30, tzinfo=UTC)


def spans(text, now=NOW):
    return [(w.phrase, w.start.date().isoformat(), w.end.date().isoformat()) for w in when.windows(text, now)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("what did we decide last May?", [("last May", "2023-05-01", "2023-06-01")]),
        ("camping in june", [("in june", "2023-06-01", "2023-07-01")]),
        ("what happened in 2022", [("2022", "2022-01-01", "2023-01-01")]),
        ("as of 1 February, 2023", [("1 February, 2023", "2023-02-01", "2023-02-02")]),
        ("the painting of October 13, 2023", [("October 13, 2023", "2023-10-13", "2023-10-14")]),
        ("the storm of 2023-07-07", [("2023-07-07", "2023-07-07", "2023-07-08")]),
        ("two weeks ago", [("two weeks ago", "2023-10-02", "2023-10-09")]),
        ("yesterday's call", [("yesterday", "2023-10-19", "2023-10-20")]),
        ("last month", [("last month", "2023-09-01", "2023-10-01")]),
        ("what did she paint recently", [("recently", "2023-09-20", "2023-10-20")]),
        # Two times as the edges of a span: one window, both edges included.
        (
            "where was he between August 11 and August 15 2023?",
            [("August 11 and August 15 2023", "2023-08-11", "2023-08-16")],
        ),
        ("what did we discuss from March to May", [("March to May", "2023-03-01", "2023-06-01")]),
        (
            "in May and in June",
            [("in May", "2023-05-01", "2023-06-01"), ("in June", "2023-06-01", "2023-07-01")],
        ),
        (
            "from August 15 to August 11",
            [("August 15", "2023-08-15", "2023-08-16"), ("August 11", "2023-08-11", "2023-08-12")],
        ),
    ],
)
def test_time_expressions_become_windows_relative_to_now(text, expected):
    assert spans(text) == expected


def test_words_that_only_look_like_times_are_not_read_as_times():
    assert spans("May I ask where the march starts?") == []
    assert spans("maybe the 300 people at the 1000 km race") == []
    assert spans("the Marchetti report") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("что мы решили в мае?", [("мае", "2023-05-01", "2023-06-01")]),
        ("платёж от 15 декабря", [("15 декабря", "2022-12-15", "2022-12-16")]),
        ("релиз 15 декабря 2023 года", [("15 декабря 2023", "2023-12-15", "2023-12-16")]),
        ("счёт от 03.02.2023", [("03.02.2023", "2023-02-03", "2023-02-04")]),
        ("отпуск в июле 2022", [("июле 2022", "2022-07-01", "2022-08-01")]),
        ("три дня назад", [("три дня назад", "2023-10-17", "2023-10-18")]),
        ("две недели назад", [("две недели назад", "2023-10-02", "2023-10-09")]),
        ("что было на прошлой неделе", [("прошлой неделе", "2023-10-09", "2023-10-16")]),
        ("расход в месяц в прошлом году", [("прошлом году", "2022-01-01", "2023-01-01")]),
        ("Вчера звонил врач", [("Вчера", "2023-10-19", "2023-10-20")]),
        ("что я недавно читал", [("недавно", "2023-09-20", "2023-10-20")]),
        ("что было с 3 марта по 5 марта", [("3 марта по 5 марта", "2023-03-03", "2023-03-06")]),
        ("从三月到五月我们聊了什么", [("三月到五月", "2023-03-01", "2023-06-01")]),
        ("八月份那次宕机", [("八月份", "2023-08-01", "2023-09-01")]),
        ("十一月的云账单", [("十一月", "2022-11-01", "2022-12-01")]),
        ("去年五月我们决定了什么", [("去年五月", "2022-05-01", "2022-06-01")]),
        ("2023年5月7日的会议", [("2023年5月7日", "2023-05-07", "2023-05-08")]),
        ("三天前", [("三天前", "2023-10-17", "2023-10-18")]),
        ("上周的会议", [("上周", "2023-10-09", "2023-10-16")]),
        ("上个月花了多少", [("上个月", "2023-09-01", "2023-10-01")]),
        ("2023年初的年终奖", [("2023年", "2023-01-01", "2024-01-01")]),
        ("昨天说了什么", [("昨天", "2023-10-19", "2023-10-20")]),
        ("我最近用哪个软件", [("最近", "2023-09-20", "2023-10-20")]),
    ],
)
def test_russian_and_chinese_time_expressions_become_windows(text, expected):
    assert spans(text) == expected


def test_russian_and_chinese_words_that_only_look_like_times_are_not_read_as_times():
    assert spans("Марта сказала, что придёт") == []  # a name, not March
    assert spans("расход в месяц, два дня в неделю") == []
    assert spans("周杰推荐的古镇，每周上课，年会上，月租多少") == []
    assert spans("2月30日，13月，一二三月") == []  # no such day, no such month, no number


def test_last_may_said_in_may_is_a_year_ago():
    assert spans("last May", datetime(2024, 5, 20, tzinfo=UTC)) == [("last May", "2023-05-01", "2023-06-01")]
    assert spans("in May", datetime(2024, 8, 20, tzinfo=UTC)) == [("in May", "2024-05-01", "2024-06-01")]


def test_a_query_with_last_may_prefers_mays_turns(caller):
    now = timezone.now()
    may = datetime(now.year if now.month > 5 else now.year - 1, 5, 12, 10, 0, tzinfo=UTC)
    text = ["we went hiking in the hills with the dog and got lost near the lake"]
    dates = {"march": may.replace(month=3), "may": may, "august": may.replace(month=8, year=may.year - 1)}
    ids = {name: turns(caller, name, text, at=at)["episode_ids"][0] for name, at in dates.items()}

    plain = caller.post("/api/v1/search", {"query": "hiking in the hills with the dog"}).json()["results"]
    assert {h["episode_id"] for h in plain} == set(ids.values())
    timed = caller.post(
        "/api/v1/search", {"query": "where did we go hiking with the dog last May?", "explain": True}
    ).json()["results"]
    assert timed[0]["episode_id"] == ids["may"]
    assert timed[0]["explain"]["time"] > max(h["explain"]["time"] for h in timed[1:])
    # A boost, not a filter: the other months are still found, and every hit says when it was.
    assert {h["episode_id"] for h in timed} == set(ids.values())
    assert timed[0]["date"] == may.date().isoformat()


@pytest.mark.parametrize(
    ("text", "query", "years_back"),
    [
        # "в прошлом мае", as "last May": this year's May once May is over, else a year ago.
        ("мы ходили в поход в горы с собакой", "куда мы ходили в поход с собакой в прошлом мае?", None),
        ("我们带着狗去山里徒步", "去年五月我们带着狗去哪里徒步？", 1),
    ],
    ids=["ru", "zh"],
)
def test_a_russian_or_chinese_query_naming_a_month_prefers_that_months_turns(caller, text, query, years_back):
    now = timezone.now()
    year = now.year - years_back if years_back else now.year if now.month > 5 else now.year - 1
    may = datetime(year, 5, 12, 10, 0, tzinfo=UTC)
    dates = {"march": may.replace(month=3), "may": may, "august": may.replace(month=8, year=year - 1)}
    ids = {name: turns(caller, name, [text], at=at)["episode_ids"][0] for name, at in dates.items()}
    timed = caller.post("/api/v1/search", {"query": query, "explain": True}).json()["results"]
    assert timed[0]["episode_id"] == ids["may"]
    assert timed[0]["explain"]["time"] > max(h["explain"]["time"] for h in timed[1:])
    assert {h["episode_id"] for h in timed} == set(ids.values())  # a boost, not a filter
    assert timed[0]["date"] == may.date().isoformat()


def test_a_time_in_the_query_changes_nothing_when_the_boost_is_off(caller, settings):
    settings.MEMORY = {**settings.MEMORY, "SEARCH_TIME_BOOST": 0.0}
    turns(caller, "s", ["we went hiking in the hills"], at=datetime(2024, 5, 12, tzinfo=UTC))
    hit = caller.post("/api/v1/search", {"query": "hiking in May 2024", "explain": True}).json()["results"][0]
    assert "time" not in hit["explain"]


def test_a_named_month_lifts_decisively_and_recently_by_a_share_of_it():
    from episodes.stores.rows import RankRow
    from retrieval.ranking import LOOSE_SHARE, time_factor

    def row(at):
        return RankRow(1, "hot", "active", False, 0, at, at, at, at)

    boost = 4.0
    october = row(datetime(2023, 10, 12, tzinfo=UTC))
    august = row(datetime(2023, 8, 12, tzinfo=UTC))
    in_october = when.windows("what did she paint in October 2023?", NOW)
    recently = when.windows("what did she paint recently", NOW)
    assert [w.loose for w in in_october + recently] == [False, True]
    # Inside the named month: the whole boost, so a memory of it outranks one up to five times
    # as relevant from another month (two months out: about a sixtieth of the lift).
    assert time_factor(october, in_october, boost) == pytest.approx(1 + boost)
    assert 1 < time_factor(august, in_october, boost) < 1 + boost / 40
    # "Recently" says little of which memories are meant: a share of the lift.
    assert time_factor(october, recently, boost) == pytest.approx(1 + boost * LOOSE_SHARE)
    assert time_factor(october, [], boost) == time_factor(october, in_october, 0.0) == 1.0
