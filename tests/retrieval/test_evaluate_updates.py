"""`manage.py evaluate updates`: the same questions with the supersedes links ingest made and
without them, on a conversation written here; the shipped set names sessions it holds."""

import json

import pytest
from django.core.management import call_command

from memory_platform.tenancy.models import Tenant
from retrieval.evaluation import updates

pytestmark = pytest.mark.django_db(transaction=True)

MAYA = {
    "id": "en-x",
    "language": "en",
    "user": "maya",
    "sessions": [
        {
            "id": "hunt",
            "at": "2026-08-13T18:00:00+00:00",
            "turns": [
                "Maya and I are looking at flats to rent in Lisbon, our budget is up to 1,600 EUR a month.",
                "Got it: rent up to 1,600 EUR. Any area in mind?",
                "We are leaning towards Alfama, close to the river.",
                "Alfama noted. I will keep an eye on listings there.",
            ],
        },
        {
            "id": "lease",
            "at": "2026-09-13T18:00:00+00:00",
            "turns": [
                "We decided on Arroios in the end, not Alfama.",
                "Congratulations! Did you sign already?",
                "Yes, we signed the lease at Rua Morais Soares, the rent is 1,750 EUR a month.",
                "Noted: you now rent in Arroios, 1,750 EUR a month.",
            ],
        },
    ],
    "questions": [
        {
            "question": "Where did Maya end up renting, and how much is the rent?",
            "kind": "current",
            "newer": "lease",
            "older": ["hunt"],
        },
        {
            "question": "What was our budget when we started looking for flats?",
            "kind": "past",
            "answer": "hunt",
        },
    ],
}


def test_evaluate_updates_ranks_with_the_links_and_without_them(tmp_path, capsys):
    path = tmp_path / "updates.json"
    path.write_text(json.dumps([MAYA]))
    call_command("evaluate", "updates", str(path), "--json")
    result = json.loads(capsys.readouterr().out)["summary"]
    assert (result["linked"], result["updates"], result["other_links"]) == (1, 1, 0)
    assert result["without_links"]["all"]["newer_above"] == 0.0
    assert result["with_links"]["all"]["newer_above"] == 1.0
    # The replaced memory is still found, right below its update.
    assert result["with_links"]["all"]["past_mrr"] == 0.5
    assert not Tenant.objects.filter(name__startswith="updates-en-x").exists()


def test_the_shipped_set_names_sessions_it_holds():
    conversations = json.loads(updates.DATA.read_text())
    current = 0
    for conversation in conversations:
        sessions = {s["id"] for s in conversation["sessions"]}
        for question in conversation["questions"]:
            named = (
                [question["answer"]]
                if question["kind"] == "past"
                else [question["newer"], *question["older"]]
            )
            assert set(named) <= sessions, (conversation["id"], question["question"])
            current += question["kind"] == "current"
    assert current >= 30
    assert {c["language"] for c in conversations} == {"en", "ru", "zh"}
