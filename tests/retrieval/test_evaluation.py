"""The LoCoMo harness behind `manage.py evaluate locomo`: its metrics on hand-made rankings, and
a whole run over a small conversation in LoCoMo's format (written here, not the dataset)."""

import json
import math

import pytest
from django.core.management import call_command

from episodes.models import Turn
from memory_platform.tenancy.models import Tenant
from retrieval.evaluation import multilingual
from retrieval.evaluation.locomo import load, normalise_evidence, turn_text
from retrieval.evaluation.metrics import count_tokens, score_episodes, score_ranking

pytestmark = pytest.mark.django_db(transaction=True)


def test_metrics_of_a_hand_made_ranking():
    # Evidence turns 7 and 9. Items: a hot turn each, or a warm episode carrying several turns.
    items = [{1}, {2}, {7}, {3, 4}, {5}, {6}, {8, 9}]
    scores = score_ranking(items, {7, 9})
    assert scores["recall5"] == 1.0 and scores["recall10"] == 1.0
    assert scores["share5"] == 0.5 and scores["share10"] == 1.0
    assert scores["mrr"] == pytest.approx(1 / 3)
    dcg = 1 / math.log2(3 + 1) + 1 / math.log2(7 + 1)  # relevant at ranks 3 and 7
    ideal = 1 / math.log2(2) + 1 / math.log2(3)
    assert scores["ndcg10"] == pytest.approx(dcg / ideal)

    missed = score_ranking([{1}] * 12 + [{7}], {7})
    assert missed == {
        "recall5": 0.0,
        "recall10": 0.0,
        "share5": 0.0,
        "share10": 0.0,
        "mrr": 1 / 13,
        "ndcg10": 0.0,
    }


def test_episode_metrics_count_one_item_per_hit_whatever_its_layer():
    # Evidence turn 7, in the third hit (a warm episode of turns 6-8); a hot hit of three turns first.
    hits = [{1, 2, 3}, {4}, {6, 7, 8}, {9}]
    assert score_episodes(hits, {7}) == {"recall3": 1.0, "recall5": 1.0, "recall10": 1.0, "mrr": 1 / 3}
    assert score_episodes(hits[:2] + [{5}] * 9 + hits[2:], {7}) == {
        "recall3": 0.0,
        "recall5": 0.0,
        "recall10": 0.0,
        "mrr": 1 / 12,
    }


def test_tokens_are_counted_on_the_answers_json():
    short = count_tokens([{"turns": [{"text": "the cello"}]}])
    longer = count_tokens([{"turns": [{"text": "the cello " * 50}]}])
    assert longer - short == 98  # "the cello" is two tokens: 49 more of them


def test_evidence_ids_and_turn_text_are_normalised():
    assert normalise_evidence(["D8:6; D9:17", "D:11:26", "D30:05", "junk"]) == [
        "D8:6",
        "D9:17",
        "D11:26",
        "D30:5",
    ]
    assert turn_text({"speaker": "Ana", "text": "Look!", "blip_caption": "a photo of a red kite"}) == (
        "Ana: Look! [shares a photo of a red kite]"
    )
    assert turn_text({"speaker": "Ana", "text": "Hi"}) == "Ana: Hi"


def conversation_file(tmp_path):
    turns_1 = [
        {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a greyhound called Comet last week."},
        {"speaker": "Ben", "dia_id": "D1:2", "text": "A greyhound! Do you run together?"},
        {
            "speaker": "Ana",
            "dia_id": "D1:3",
            "text": "Every morning along the canal.",
            "blip_caption": "a dog by water",
        },
    ]
    turns_2 = [
        {"speaker": "Ben", "dia_id": "D2:1", "text": "I started learning the cello in June."},
        {"speaker": "Ana", "dia_id": "D2:2", "text": "How is the cello going?"},
        {"speaker": "Ben", "dia_id": "D2:3", "text": "Slowly, my teacher is patient."},
    ]
    data = [
        {
            "sample_id": "conv-test",
            "conversation": {
                "speaker_a": "Ana",
                "speaker_b": "Ben",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": turns_1,
                "session_2_date_time": "10:37 am on 27 June, 2023",
                "session_2": turns_2,
            },
            # Generated fields the harness must never index.
            "observation": {"session_1_observation": {"Ana": [["Ana owns a zebrafinch aviary", "D1:1"]]}},
            "session_summary": {"session_1_summary": "Ana talks about her zebrafinch aviary."},
            "event_summary": {"events_session_1": {"Ana": ["zebrafinch aviary"]}},
            "qa": [
                {
                    "question": "What is the name of Ana's greyhound?",
                    "answer": "Comet",
                    "evidence": ["D1:1"],
                    "category": 4,
                },
                {
                    "question": "When did Ben start the cello?",
                    "answer": "June",
                    "evidence": ["D2:1"],
                    "category": 2,
                },
                {
                    "question": "Where do Ana and Comet run?",
                    "answer": "canal",
                    "evidence": ["D1:3; D1:1"],
                    "category": 1,
                },
                {"question": "Unanswerable", "answer": "", "evidence": ["D1:2"], "category": 5},
                {"question": "No evidence here", "answer": "", "evidence": [], "category": 3},
            ],
        }
    ]
    path = tmp_path / "locomo-test.json"
    path.write_text(json.dumps(data))
    return path


def test_loading_keeps_the_dialogue_only(tmp_path):
    (conversation,) = load(conversation_file(tmp_path))
    assert conversation.speakers == ("Ana", "Ben")
    assert [n for n, _, _ in conversation.sessions] == [1, 2]
    assert conversation.sessions[1][1].isoformat() == "2023-06-27T10:37:00+00:00"
    assert len(conversation.questions) == 4  # category 5 is left out


def test_evaluate_command_runs_every_question_through_search_and_cleans_up(tmp_path, capsys):
    path = conversation_file(tmp_path)
    before = set(Tenant.objects.values_list("pk", flat=True))
    call_command("evaluate", "locomo", str(path), "--json", "--keep")
    result = json.loads(capsys.readouterr().out)["all_hot"]
    assert result["conversations"] == 1 and result["turns"] == 6
    assert result["questions"] == 3 and result["skipped_no_evidence"] == 1
    assert set(result["per_category"]) == {"multi-hop", "single-hop", "temporal"}
    # Six turns, ten items: every question's evidence is within reach, and found.
    assert result["overall"]["recall10"] == 1.0
    assert 0.0 < result["overall"]["mrr"] <= 1.0
    # Two episodes: each question's is among the first two hits.
    episodes = result["episodes"]["overall"]
    assert episodes["n"] == 3 and episodes["recall3"] == 1.0 and episodes["mrr"] >= 0.5
    assert 30 < result["tokens_at_10"]["median"] <= result["tokens_at_10"]["p95"]

    (tenant,) = Tenant.objects.exclude(pk__in=before)
    texts = list(
        Turn.objects.across_tenants("test")
        .filter(tenant=tenant)
        .order_by("occurred_at")
        .values_list("text", "metadata")
    )
    assert texts[2] == (
        "Ana: Every morning along the canal. [shares a dog by water]",
        {"dia_id": "D1:3", "speaker": "Ana"},
    )
    assert (
        not Turn.objects.across_tenants("test").filter(tenant=tenant, text__icontains="zebrafinch").exists()
    )

    # Without --keep the run's tenant is gone afterwards.
    call_command("evaluate", "locomo", str(path), "--json")
    capsys.readouterr()
    assert set(Tenant.objects.values_list("pk", flat=True)) == before | {tenant.pk}


def test_evaluate_multilingual_reports_each_language_on_full_text_alone_and_fused(tmp_path, capsys):
    def session(speakers, texts):
        return [{"speaker": speakers[i % 2], "dia_id": f"D1:{i + 1}", "text": t} for i, t in enumerate(texts)]

    data = [
        {
            "sample_id": "ru-x",
            "language": "ru",
            "conversation": {
                "speaker_a": "Олег",
                "speaker_b": "Ира",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": session(
                    ("Олег", "Ира"),
                    [
                        "Релиз переносим из-за бага в платёжном модуле",
                        "Понятно",
                        "Кот Барсик заболел",
                        "Жаль",
                    ],
                ),
            },
            "qa": [
                {
                    "question": "Что с платёжным модулем?",
                    "evidence": ["D1:1"],
                    "category": 4,
                    "match": "inflected",
                },
                {"question": "Как здоровье питомца?", "evidence": ["D1:3"], "category": 4, "match": "none"},
            ],
        },
        {
            "sample_id": "zh-x",
            "language": "zh",
            "conversation": {
                "speaker_a": "李娜",
                "speaker_b": "王伟",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": session(
                    ("李娜", "王伟"), ["我们决定使用PostgreSQL作为主数据库", "好的", "周末去爬山", "好"]
                ),
            },
            "qa": [
                {
                    "question": "用的是哪个数据库？",
                    "evidence": ["D1:1"],
                    "category": 4,
                    "match": "unsegmented",
                }
            ],
        },
    ]
    path = tmp_path / "ml.json"
    path.write_text(json.dumps(data, ensure_ascii=False))
    call_command("evaluate", "multilingual", str(path), "--json")
    result = json.loads(capsys.readouterr().out)
    text, fused = result["text_only"], result["fused"]
    assert set(fused["per_category"]) == {"ru inflected", "ru none", "zh unsegmented"}
    assert text["per_category"]["ru inflected"]["recall5"] == 1.0
    assert text["per_category"]["zh unsegmented"]["mrr"] == 1.0
    # Full text alone finds nothing for a question that shares no word with its answer.
    assert text["per_category"]["ru none"]["recall10"] == 0.0
    assert {"ru", "zh"} == set(multilingual.per_language(fused))
    assert not Tenant.objects.filter(name__startswith="locomo-ru-x").exists()


def test_a_scheduler_ticking_the_evaluated_tenants_is_reported():
    from datetime import timedelta

    from django.utils import timezone

    from lifecycle.models import TickRun
    from retrieval.evaluation.locomo import scheduled_ticks

    started = timezone.now()
    tenant = Tenant.objects.create(name="evaluated")
    # the harness's own tick, at the conversation's date, is not one
    TickRun.objects.create(tenant=tenant, now_used=started - timedelta(days=900), counts={"hot_to_warm": 9})
    assert scheduled_ticks([tenant], started) == {"runs": 0, "moved": 0}
    TickRun.objects.create(
        tenant=tenant,
        now_used=started + timedelta(seconds=5),
        counts={"scored": 3, "hot_to_warm": 3, "active_to_dormant": 2},
    )
    assert scheduled_ticks([tenant], started) == {"runs": 1, "moved": 5}


def test_evaluate_multilingual_says_when_a_scheduler_moved_its_tenants():
    from retrieval.evaluation.metrics import TURN_METRICS

    row = {"n": 2, **dict.fromkeys(TURN_METRICS, 0.5)}

    def run(ticks):
        return {
            "conversations": 1,
            "questions": 2,
            "per_category": {"ru none": row},
            "scheduled_ticks": ticks,
        }

    quiet = {"runs": 0, "moved": 0}
    report = multilingual.format_report({"text_only": run(quiet), "fused": run(quiet)})
    assert "scheduler" not in report
    report = multilingual.format_report({"text_only": run(quiet), "fused": run({"runs": 2, "moved": 7})})
    assert "fused: a running scheduler also ticked these tenants 2 time(s)" in report
    assert "moving 7 episode(s)" in report and "text only:" not in report
