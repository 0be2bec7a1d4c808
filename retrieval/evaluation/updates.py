"""The updates set behind `manage.py evaluate updates`: does a newer memory rank above the one it
replaces (``lifecycle.updates``, docs/decisions/0044-updates-above-what-they-replace.md)?

Written for the project (``data/updates.json``): conversations of one user, in English, Russian and
Chinese, where a fact changes from one session to a later one (a city, a job, a diet, a phone
number, a plan, a price; chains of two changes), among sessions about other things. Sessions go in
through the ingest the API calls, as a new user's would, each its own episode; nothing is aged.
Questions of kind ``current`` ask for the value now ("Where does Ben live now?", and without a word
of time: "Which editor does Raj use?") and name the session that holds it (``newer``) and the ones
it replaces (``older``); questions of kind ``past`` ask for a value replaced since (``answer``).

Every question runs twice through the search service the API calls, on the same tenant: with the
``supersedes`` links ingest made, then with them deleted (the ranking before them; searches record
no use, so the first run does not move the second). Reported: the share of current questions whose
newer memory ranks above every older one among the first ``LIMIT`` hits (one not found ranks below
all), the newer memory's MRR and how often it is first; the past questions' MRR; and the links made
against the (newer, older) pairs the questions name. A scheduler that ticked the tenants meanwhile
is reported, as ``evaluate locomo`` does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from episodes.models import Link, LinkKind
from episodes.scope import Scope
from episodes.services import TurnInput
from lifecycle.services import turns_ingest
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.services import tenant_create
from retrieval.query import SearchQuery
from retrieval.services import search

from . import locomo
from .metrics import scheduler_note

DATA = Path(__file__).parent / "data" / "updates.json"
LIMIT = 10
RUNS = ("without_links", "with_links")


def ingest(tenant: Tenant, conversation: dict[str, Any]) -> dict[int, str]:
    """Each session as one ingest (user and assistant by turns); returns episode id -> session."""
    session_of: dict[int, str] = {}
    for session in conversation["sessions"]:
        at = datetime.fromisoformat(session["at"])
        scope = Scope.owner(user_id=conversation["user"], session_id=session["id"])
        turns = [
            TurnInput(
                role="user" if i % 2 == 0 else "assistant",
                text=text,
                scope=scope,
                occurred_at=at + timedelta(minutes=i),
                episode_boundary=i == 0,
            )
            for i, text in enumerate(session["turns"])
        ]
        result = turns_ingest(tenant=tenant, turns=turns, now=at)
        session_of.update((pk, session["id"]) for pk in result.episode_ids)
    return session_of


def ranks(tenant: Tenant, question: str, session_of: dict[int, str], now: datetime) -> dict[str, int]:
    """Per session, the rank (1 first) of its best-ranked episode among the hits."""
    result = search(
        tenant=tenant, query=SearchQuery(text=question, limit=LIMIT, record_access=False), now=now
    )
    out: dict[str, int] = {}
    for rank, hit in enumerate(result.hits, start=1):
        out.setdefault(session_of.get(hit.episode.pk, ""), rank)
    return out


def score(question: dict[str, Any], found: dict[str, int]) -> dict[str, float]:
    missing = LIMIT + 1
    if question["kind"] == "past":
        rank = found.get(question["answer"], missing)
        return {"mrr": 1 / rank if rank <= LIMIT else 0.0, "found": float(rank <= LIMIT)}
    newer = found.get(question["newer"], missing)
    older = min(found.get(s, missing) for s in question["older"])
    return {
        "above": float(newer < older),
        "first": float(newer == 1),
        "mrr": 1 / newer if newer <= LIMIT else 0.0,
    }


def evaluate_conversation(
    conversation: dict[str, Any], log: Callable[[str], None], keep: bool = False
) -> dict[str, Any]:
    tenant = tenant_create(name=f"updates-{conversation['id']}-{uuid.uuid4().hex[:6]}")
    started = timezone.now()
    try:
        session_of = ingest(tenant, conversation)
        links = Link.objects.filter(tenant=tenant, kind=LinkKind.SUPERSEDES)
        made = {(session_of[src], session_of[dst]) for src, dst in links.values_list("src_id", "dst_id")}
        wanted = {
            (q["newer"], older)
            for q in conversation["questions"]
            if q["kind"] == "current"
            for older in q["older"]
        }
        now = max(datetime.fromisoformat(s["at"]) for s in conversation["sessions"]) + timedelta(days=1)
        rows: dict[str, list[dict[str, Any]]] = {}
        for run in reversed(RUNS):  # with the links first, then without them
            if run == "without_links":
                links.delete()
            rows[run] = [
                {
                    "question": q["question"],
                    "kind": q["kind"],
                    **score(q, ranks(tenant, q["question"], session_of, now)),
                }
                for q in conversation["questions"]
            ]
        log(
            f"{conversation['id']}: {len(made & wanted)}/{len(wanted)} updates linked, {len(made - wanted)} other links"
        )
        return {
            "id": conversation["id"],
            "language": conversation["language"],
            "linked": len(made & wanted),
            "updates": len(wanted),
            "other_links": sorted(made - wanted),
            "runs": rows,
            "scheduled_ticks": locomo.scheduled_ticks([tenant], started),
        }
    finally:
        if not keep:
            tenant.delete()  # its hot documents and index go with it


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def summary(conversations: list[dict[str, Any]]) -> dict[str, Any]:
    """Per run, and per language within it: the current questions' shares and MRR, the past ones' MRR."""
    out: dict[str, Any] = {
        "scheduled_ticks": {
            key: sum(c["scheduled_ticks"][key] for c in conversations) for key in ("runs", "moved")
        },
        "updates": sum(c["updates"] for c in conversations),
        "linked": sum(c["linked"] for c in conversations),
        "other_links": sum(len(c["other_links"]) for c in conversations),
    }
    languages = ["all", *sorted({c["language"] for c in conversations})]
    for run in RUNS:
        out[run] = {}
        for language in languages:
            rows = [r for c in conversations if language in ("all", c["language"]) for r in c["runs"][run]]
            current = [r for r in rows if r["kind"] == "current"]
            past = [r for r in rows if r["kind"] == "past"]
            out[run][language] = {
                "current": len(current),
                "newer_above": _mean([r["above"] for r in current]),
                "newer_first": _mean([r["first"] for r in current]),
                "newer_mrr": _mean([r["mrr"] for r in current]),
                "past": len(past),
                "past_mrr": _mean([r["mrr"] for r in past]),
            }
    return out


def run(
    path: Path, *, log: Callable[[str], None], keep: bool = False, limit_conversations: int | None = None
) -> dict[str, Any]:
    conversations = json.loads(Path(path).read_text())[:limit_conversations]
    found = [evaluate_conversation(c, log, keep) for c in conversations]
    return {"summary": summary(found), "conversations": found}


def format_report(results: dict[str, Any]) -> str:
    s = results["summary"]
    lines = [
        f"Updates linked: {s['linked']}/{s['updates']} (newer, older) pairs the questions name; "
        f"{s['other_links']} other links",
        f"{'run':<15}{'language':<10}{'current':>8}{'newer above':>13}{'newer first':>13}{'newer MRR':>11}"
        f"{'past':>6}{'past MRR':>10}",
    ]
    for run in RUNS:
        for language, row in s[run].items():
            lines.append(
                f"{run:<15}{language:<10}{row['current']:>8}{row['newer_above']:>13.3f}{row['newer_first']:>13.3f}"
                f"{row['newer_mrr']:>11.3f}{row['past']:>6}{row['past_mrr']:>10.3f}"
            )
    return "\n".join(filter(None, [*lines, scheduler_note(s)]))
