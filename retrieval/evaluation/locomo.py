"""LoCoMo recall harness behind `manage.py evaluate locomo`.

Each conversation goes into a tenant of its own, with its real session dates as `occurred_at` and
the LoCoMo `dia_id` in each turn's metadata; then every question of categories 1-4 runs through
`retrieval.services.search`, the function the API calls. The generated `observation`,
`session_summary` and `event_summary` fields are never read.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.utils import timezone

from episodes.models import Turn
from episodes.scope import Scope
from episodes.services import TurnInput
from episodes.shapes import CompactHit
from lifecycle.models import TickRun
from lifecycle.services import turns_ingest
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.services import tenant_create
from retrieval.context import context
from retrieval.query import SearchQuery
from retrieval.ranking import RetrievalWeights
from retrieval.services import search
from retrieval.shaping import hit_bodies

from .metrics import CONTEXT_BUDGETS, Read, Report, count_tokens, score_episodes, score_ranking

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DATE_FORMAT = "%I:%M %p on %d %B, %Y"
TURN_SPACING = timedelta(seconds=30)


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    sessions: list[tuple[int, datetime, list[dict[str, Any]]]]
    questions: list[dict[str, Any]]
    #: The conversation's language ("en", "ru", "zh"): the evaluation's own sets say it.
    language: str = "en"


#: Which row of the report a question counts in: LoCoMo's categories by default.
Group = Callable[[Conversation, dict[str, Any]], str]


def by_category(conversation: Conversation, question: dict[str, Any]) -> str:
    return CATEGORIES[question["category"]]


def load(path: Path) -> list[Conversation]:
    data = json.loads(Path(path).read_text())
    out: list[Conversation] = []
    for item in data:
        conv = item["conversation"]
        sessions = []
        for key, turns in conv.items():
            match = re.fullmatch(r"session_(\d+)", key)
            if not match or not isinstance(turns, list) or not turns:
                continue
            number = int(match.group(1))
            date = datetime.strptime(conv[f"session_{number}_date_time"], DATE_FORMAT).replace(tzinfo=UTC)
            sessions.append((number, date, turns))
        sessions.sort(key=lambda s: s[0])
        out.append(
            Conversation(
                sample_id=item.get("sample_id", f"conv-{len(out)}"),
                speakers=(conv["speaker_a"], conv["speaker_b"]),
                sessions=sessions,
                questions=[q for q in item["qa"] if q.get("category") in CATEGORIES],
                language=item.get("language", "en"),
            )
        )
    return out


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares {turn['blip_caption']}]"
    return text


def normalise_evidence(evidence: list[str]) -> list[str]:
    """`"D8:6; D9:17"` -> two ids, `"D:11:26"` -> `D11:26`, `"D30:05"` -> `D30:5`."""
    out = []
    for raw in evidence:
        for part in re.split(r"[;,\s]+", raw):
            match = re.fullmatch(r"D:?(\d+):0*(\d+)", part.strip())
            if match:
                out.append(f"D{int(match.group(1))}:{int(match.group(2))}")
    return out


def ingest(conversation: Conversation, tenant: Tenant, now: datetime) -> dict[str, int]:
    """Turns in, one session at a time; returns dia_id -> turn id."""
    dia_to_turn: dict[str, int] = {}
    speaker_a = conversation.speakers[0]
    for number, date, turns in conversation.sessions:
        inputs = [
            TurnInput(
                role="user" if turn["speaker"] == speaker_a else "assistant",
                text=turn_text(turn),
                scope=Scope.owner(user_id=speaker_a, session_id=f"session_{number}"),
                occurred_at=date + i * TURN_SPACING,
                metadata={"dia_id": turn["dia_id"], "speaker": turn["speaker"]},
                episode_boundary=i == 0,
            )
            for i, turn in enumerate(turns)
        ]
        result = turns_ingest(tenant=tenant, turns=inputs, now=now)
        for turn, ingested in zip(turns, result.turns, strict=True):
            dia_to_turn[turn["dia_id"]] = ingested.turn_id
    return dia_to_turn


def evaluate_conversation(
    conversation: Conversation,
    tenant: Tenant,
    dia_to_turn: dict[str, int],
    report: Report,
    now: datetime,
    limit: int = 10,
    weights: RetrievalWeights | None = None,
    group: Group = by_category,
    text_only: bool = False,
) -> None:
    """Every question of the conversation through ``search``; ``text_only``: the ranking the full-text
    list alone makes (no query vector, so nothing enters through the vector list)."""
    episode_turns: dict[int, set[int]] = defaultdict(set)
    layer_of_turn: dict[int, str] = {}
    for turn_id, episode_id, layer in Turn.objects.filter(tenant=tenant).values_list(
        "pk", "episode_id", "episode__layer"
    ):
        episode_turns[episode_id].add(turn_id)
        layer_of_turn[turn_id] = layer
    text_of = dict(Turn.objects.filter(tenant=tenant).values_list("pk", "text"))
    answers: list[tuple[str, list[CompactHit], dict[int, str], set[int]]] = []
    for question in conversation.questions:
        evidence = {
            dia_to_turn[d] for d in normalise_evidence(question.get("evidence", [])) if d in dia_to_turn
        }
        if not evidence:
            report.skipped += 1
            continue
        started = time.perf_counter()
        result = search(
            tenant=tenant,
            query=SearchQuery(
                text=question["question"], limit=limit, record_access=False, text_only=text_only
            ),
            now=now,
            weights=weights,
        )
        report.latencies_ms.append((time.perf_counter() - started) * 1000)
        items = [{key} if kind == "turn" else episode_turns[key] for kind, key, _ in result.ranked_items()]
        report.add(
            group(conversation, question),
            "+".join(sorted({layer_of_turn[t] for t in evidence})),
            score_ranking(items, evidence),
            score_episodes([episode_turns[h.episode.pk] for h in result.hits], evidence),
        )
        # As the API answers by default (view=compact), and what /context writes for the question
        # (the user the conversation belongs to; no session: a new one asking about the past).
        contexts = {
            budget: context(
                tenant=tenant,
                session_id=None,
                query_text=question["question"],
                max_tokens=budget,
                now=now,
                user_id=conversation.speakers[0],
                record=False,
            )["text"]
            for budget in CONTEXT_BUDGETS
        }
        bodies = hit_bodies(
            tenant,
            result.hits[:10],
            deep=False,
            view="compact",
            vector=result.query_vector,
            question=question["question"],
        )
        answers.append((group(conversation, question), bodies, contexts, evidence))
    # Counted after the searches: the tokenizer's threads would take the cores from the next one.
    for category, results, contexts, wanted in answers:
        texts = [text_of[t] for t in wanted]

        def shown(k: int, results: list[CompactHit] = results, texts: list[str] = texts) -> bool:
            return any(text in hit["text"] for hit in results[:k] for text in texts)

        report.reads.append(
            Read(
                category=category,
                shown5=shown(5),
                shown10=shown(10),
                tokens10=count_tokens(results),
                context={
                    budget: (any(text in written for text in texts), count_tokens(written))
                    for budget, written in contexts.items()
                },
            )
        )


def run(
    path: Path,
    *,
    log: Callable[[str], None],
    keep: bool = False,
    age: Callable[[Tenant, Conversation, datetime], None] | None = None,
    limit_conversations: int | None = None,
    weights: RetrievalWeights | None = None,
    group: Group = by_category,
    text_only: bool = False,
) -> dict[str, Any]:
    conversations = load(path)[:limit_conversations]
    report = Report()
    tenants: list[Tenant] = []
    started = timezone.now()
    try:
        for conversation in conversations:
            tenant = tenant_create(name=f"locomo-{conversation.sample_id}-{uuid.uuid4().hex[:6]}")
            tenants.append(tenant)
            last_date = conversation.sessions[-1][1]
            now = last_date + timedelta(days=1)
            log(
                f"{conversation.sample_id}: ingesting {sum(len(s[2]) for s in conversation.sessions)} turns "
                f"in {len(conversation.sessions)} sessions"
            )
            dia_to_turn = ingest(conversation, tenant, now=conversation.sessions[0][1])
            report.turn_count += len(dia_to_turn)
            if age is not None:
                age(tenant, conversation, now)
            log(f"{conversation.sample_id}: {len(conversation.questions)} questions")
            evaluate_conversation(
                conversation,
                tenant,
                dia_to_turn,
                report,
                now,
                weights=weights,
                group=group,
                text_only=text_only,
            )
            report.conversations += 1
        result = report.as_dict()
        result["scheduled_ticks"] = scheduled_ticks(tenants, started)
    finally:
        if not keep:
            for tenant in tenants:
                tenant.delete()  # its hot documents and index go with it
    return result


def scheduled_ticks(tenants: list[Tenant], started: datetime) -> dict[str, int]:
    """Ticks that a running scheduler (``make run``'s worker) gave the evaluation's tenants at the
    real date, besides the harness's own at the conversations' dates: an "all hot" run that got
    some is not all hot, and says so."""
    runs = TickRun.objects.filter(tenant__in=tenants, now_used__gte=started - timedelta(minutes=1))
    moved = sum(sum(v for k, v in (run.counts or {}).items() if "_to_" in k) for run in runs)
    return {"runs": runs.count(), "moved": moved}
