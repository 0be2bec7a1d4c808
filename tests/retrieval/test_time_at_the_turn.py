"""Time at the turn (docs/decisions/0042-time-at-the-turn.md): a turn's relative time phrases are
read against its own date at ingest, and a query's time counts the days an episode mentions; a
month the query names puts its episodes first. Never a filter, and an outsider sees nothing."""

from datetime import UTC, datetime, timedelta

import pytest

from episodes import when
from episodes.models import Episode, Turn
from episodes.stores import rows
from memory_platform.conf import memory_settings
from retrieval.query import SearchQuery
from retrieval.services import search
from tests.conftest import pk, turn_pk

from .test_search import turns

pytestmark = pytest.mark.django_db(transaction=True)

SAID = datetime(2023, 3, 17, 10, 0, tzinfo=UTC)  # a Friday


def days(text, said_at=SAID):
    return [when.mention_text(w) for w in when.mentioned(text, said_at)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yesterday I went bowling with Alex", ["2023-03-16"]),
        ("Вчера я ходил в боулинг с Алексом", ["2023-03-16"]),
        ("我昨天和阿列克斯去打保龄球了", ["2023-03-16"]),
        ("позавчера и 前天", ["2023-03-15", "2023-03-15"]),
        ("I moved two days ago", ["2023-03-15"]),
        ("last week was long", ["2023-03-06/2023-03-12"]),
        ("what a month last month was", ["2023-02-01/2023-02-28"]),
        ("see you next Friday", ["2023-03-24"]),
        ("last Friday, and next week", ["2023-03-10", "2023-03-20/2023-03-26"]),
        ("на прошлой неделе, три дня назад", ["2023-03-06/2023-03-12", "2023-03-14"]),
        ("上个月，三天前，下周", ["2023-02-01/2023-02-28", "2023-03-14", "2023-03-20/2023-03-26"]),
    ],
)
def test_a_turns_relative_phrases_are_read_against_its_own_date(text, expected):
    assert days(text) == expected


def test_what_holds_the_turns_own_day_and_what_is_not_relative_is_left_out():
    # Today, this week and this year add nothing to the turn's date; a date or a month it names
    # is not relative, and "recently" is a month wide.
    assert days("today, this week, this year, on 7 May 2023, in June, recently, 2022") == []
    assert days("讨论一下周末的计划") == []  # 一下 is "a little", not "next"


def test_ingest_keeps_the_days_on_the_turn_and_their_union_on_the_episode(caller):
    body = turns(
        caller,
        "s",
        ["Yesterday I went bowling", "Вчера было холодно", "我们上周去了公园", "nothing timed here"],
        at=SAID,
    )
    mentioned = [
        Turn.objects.across_tenants("test").get(pk=turn_pk(t["id"])).mentioned for t in body["turns"]
    ]
    assert mentioned == [["2023-03-16"], ["2023-03-16"], ["2023-03-06/2023-03-12"], []]
    episode = Episode.objects.across_tenants("test").get(pk=pk(body["episode_ids"][0]))
    assert episode.mentioned == ["2023-03-16", "2023-03-06/2023-03-12"]
    memory = caller.post(
        "/api/v1/memories", {"text": "Two days ago she signed the lease", "occurred_at": SAID.isoformat()}
    ).json()
    assert Episode.objects.across_tenants("test").get(pk=pk(memory["id"])).mentioned == ["2023-03-15"]


def ranked(caller, query, now):
    found = search(
        tenant=caller.tenant,
        query=SearchQuery(text=query, explain=True, record_access=False),
        now=now,
    )
    return [(h.episode.pk, h.explain) for h in found.hits]


def test_a_day_the_query_names_finds_yesterday_said_the_day_after(caller, outsider):
    sessions = {
        "mar10": ("Alex and I played tennis in the park all afternoon", SAID - timedelta(days=7)),
        "mar14": ("Alex and I cooked dinner and watched a film", SAID - timedelta(days=3)),
        "mar17": ("Yesterday Alex and I went bowling downtown", SAID),
        "mar20": ("Alex and I went to the museum and had lunch", SAID + timedelta(days=3)),
        "mar24": ("Alex and I did a long bike ride along the river", SAID + timedelta(days=7)),
    }
    ids = {
        name: pk(turns(caller, name, [text], at=at)["episode_ids"][0])
        for name, (text, at) in sessions.items()
    }
    now = datetime(2023, 4, 2, 12, 0, tzinfo=UTC)

    hits = ranked(caller, "What did Alex and I do on March 16?", now)
    assert hits[0][0] == ids["mar17"]
    # It occurred a day after the 16th; it is lifted as fully as an episode of the 16th would be,
    # by the day its turn mentions.
    assert hits[0][1]["time"] == pytest.approx(1 + memory_settings.SEARCH_TIME_BOOST)
    assert {episode for episode, _ in hits} == set(ids.values())  # never a filter

    assert ranked(outsider, "What did Alex and I do on March 16?", now) == []
    assert rows.rank_rows(outsider.tenant, list(ids.values()), mentioned=True) == []


def test_a_month_the_query_names_comes_first_over_one_that_matches_the_words_better(caller):
    september = pk(
        turns(
            caller,
            "sep",
            ["We talked about the garden and the tomatoes", "and about the new fence"],
            at=datetime(2023, 9, 14, 18, 0, tzinfo=UTC),
        )["episode_ids"][0]
    )
    november = pk(
        turns(
            caller,
            "nov",
            [
                "What did we talk about? We talked about the trip",
                "we talk about it a lot, we talked for hours",
            ],
            at=datetime(2023, 9, 30, 18, 0, tzinfo=UTC) + timedelta(days=41),  # 41 days after September
        )["episode_ids"][0]
    )
    now = datetime(2023, 12, 1, 12, 0, tzinfo=UTC)

    plain = ranked(caller, "What did we talk about?", now)
    assert [episode for episode, _ in plain] == [november, september]
    assert all("time" not in explain for _, explain in plain)  # no time named: unaffected

    timed = ranked(caller, "What did we talk about in September?", now)
    assert [episode for episode, _ in timed] == [september, november]  # below, not hidden
    boost = memory_settings.SEARCH_TIME_BOOST
    assert timed[0][1]["time"] == pytest.approx(1 + boost)
    assert 1 < timed[1][1]["time"] < 1 + boost / 40  # about 41 days outside: a fortieth of the lift


def spans(text, now):
    return [(w.phrase, w.start.date().isoformat(), w.end.date().isoformat()) for w in when.windows(text, now)]


def test_a_querys_relative_phrase_beside_a_named_date_counts_from_that_date():
    now = datetime(2022, 11, 12, 9, 0, tzinfo=UTC)
    assert spans("What did Joanna finish last Friday, on 23 January 2022?", now) == [
        ("last Friday", "2022-01-21", "2022-01-22"),
        ("23 January 2022", "2022-01-23", "2022-01-24"),
    ]
    assert spans("what did she bake recently in May 2022?", now) == [
        ("recently", "2022-05-01", "2022-05-31"),
        ("May 2022", "2022-05-01", "2022-06-01"),
    ]
    # A date after now does not move "last week" into the future.
    assert spans("last week, and the launch on 1 December 2022", now)[0] == (
        "last week",
        "2022-10-31",
        "2022-11-07",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a few days ago", ("a few days ago", "2022-11-09", "2022-11-10")),
        ("a couple of weeks ago", ("a couple of weeks ago", "2022-10-24", "2022-10-31")),
        ("last weekend", ("last weekend", "2022-11-05", "2022-11-07")),
        ("next Friday", ("next Friday", "2022-11-18", "2022-11-19")),
        ("the day before yesterday", ("the day before yesterday", "2022-11-10", "2022-11-11")),
    ],
)
def test_english_relative_phrases_in_a_query_are_read_without_dateparser(text, expected):
    assert spans(text, datetime(2022, 11, 12, 9, 0, tzinfo=UTC)) == [expected]
