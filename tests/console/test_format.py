"""The console's "ago" ("just now" under a minute, never "0 minutes ago") and "words"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.template import Context, Template

from console.templatetags.console_format import ago, words

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_under_a_minute_is_just_now_and_after_it_the_time_ago():
    assert ago(NOW - timedelta(seconds=30), NOW) == "just now"
    assert ago(NOW + timedelta(seconds=5), NOW) == "just now"  # a clock a little ahead
    assert ago(NOW - timedelta(minutes=5), NOW) == "5\xa0minutes ago"
    assert ago(NOW - timedelta(hours=2, minutes=3), NOW) == "2\xa0hours, 3\xa0minutes ago"
    assert ago(None, NOW) == ""


def test_the_templates_write_it():
    page = Template("{% load console_format %}{{ when|ago:now }}")
    assert page.render(Context({"when": NOW - timedelta(seconds=10), "now": NOW})) == "just now"


def test_step_names_read_as_words():
    assert words("hot_to_warm") == "hot → warm"
    assert words("merge_candidates") == "merge candidates"
    assert words("scored") == "scored"


def test_a_hits_explain_reads_as_rows_in_words():
    from console.playground import explain_rows

    rows = dict(
        explain_rows(
            {
                "source": "hot",
                "vector_rank": None,
                "text_rank": 2,
                "rrf": 0.0312345,
                "hop": {"via": "entity", "name": "Porto"},
                "score": 0.05,
            }
        )
    )
    assert rows == {
        "found in": "hot",
        "place in the vector list": "not in it",
        "place in the full-text list": "2",
        "fused score (relevance)": "0.03123",
        "reached by a hop": "entity Porto",
        "score": "0.05",
    }


def test_a_chart_draws_no_line_up_and_down_one_instant():
    from datetime import UTC, datetime, timedelta

    from console.charts import line_chart

    at = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    svg = line_chart("Episodes by layer", {"hot": [(at, 3.0), (at, 5.0)]})
    assert svg.count("<circle") == 1 and 'points="' in svg
    coordinates = svg.split('points="')[1].split('"')[0].split()
    assert len(coordinates) == 1  # one time, one point: the later figure
    two = line_chart("Episodes by layer", {"hot": [(at, 3.0), (at + timedelta(hours=1), 5.0)]})
    assert "<circle" not in two and len(two.split('points="')[1].split('"')[0].split()) == 2
