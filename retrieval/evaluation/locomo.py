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
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from episodes.models import Episode, Turn
from episodes.scope import Scope
from episodes.services import TurnInput
from lifecycle.services import turns_ingest
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.services import tenant_create
from retrieval.context import estimate_tokens
from retrieval.query import SearchQuery
from retrieval.ranking import RetrievalWeights
from retrieval.services import search

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DATE_FORMAT = "%I:%M %p on %d %B, %Y"
TURN_SPACING = timedelta(seconds=30)


@dataclass
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    sessions: list[tuple[int, datetime, list[dict[str, Any]]]]
    questions: list[dict[str, Any]]


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


@dataclass
class Scores:
    n: int = 0
    recall5: float = 0.0
    recall10: float = 0.0
    share5: float = 0.0
    share10: float = 0.0
    mrr: float = 0.0
    ndcg10: float = 0.0

    def add(self, other: dict[str, float]) -> None:
        self.n += 1
        for name in ("recall5", "recall10", "share5", "share10", "mrr", "ndcg10"):
            setattr(self, name, getattr(self, name) + other[name])

    def mean(self) -> dict[str, float]:
        if not self.n:
            return {"n": 0}
        return {
            "n": self.n,
            **{
                k: round(getattr(self, k) / self.n, 4)
                for k in ("recall5", "recall10", "share5", "share10", "mrr", "ndcg10")
            },
        }


def score_ranking(items: list[set[int]], evidence: set[int]) -> dict[str, float]:
    """Metrics for one question. ``items``: the ranked list, each item the turn ids it carries."""
    relevant = [bool(item & evidence) for item in items]

    def covered(k: int) -> float:
        found: set[int] = set()
        for item in items[:k]:
            found |= item & evidence
        return len(found) / len(evidence)

    first = next((i for i, r in enumerate(relevant) if r), None)
    dcg = sum(1.0 / np.log2(i + 2) for i, r in enumerate(relevant[:10]) if r)
    ideal = sum(1.0 / np.log2(i + 2) for i in range(min(len(evidence), 10)))
    return {
        "recall5": float(any(relevant[:5])),
        "recall10": float(any(relevant[:10])),
        "share5": covered(5),
        "share10": covered(10),
        "mrr": 1.0 / (first + 1) if first is not None else 0.0,
        "ndcg10": dcg / ideal if ideal else 0.0,
    }


@dataclass
class Report:
    per_category: dict[str, Scores] = field(default_factory=lambda: defaultdict(Scores))
    per_layer: dict[str, Scores] = field(default_factory=lambda: defaultdict(Scores))
    latencies_ms: list[float] = field(default_factory=list)
    tokens_at_10: list[int] = field(default_factory=list)
    skipped: int = 0
    conversations: int = 0
    turns: int = 0

    def as_dict(self) -> dict[str, Any]:
        overall = Scores()
        for scores in self.per_category.values():
            for name in ("n", "recall5", "recall10", "share5", "share10", "mrr", "ndcg10"):
                setattr(overall, name, getattr(overall, name) + getattr(scores, name))
        lat = np.array(self.latencies_ms or [0.0])
        return {
            "conversations": self.conversations,
            "turns": self.turns,
            "questions": overall.n,
            "skipped_no_evidence": self.skipped,
            "per_category": {name: self.per_category[name].mean() for name in sorted(self.per_category)},
            "per_layer": {name: self.per_layer[name].mean() for name in sorted(self.per_layer)},
            "overall": overall.mean(),
            "latency_ms": {
                "p50": round(float(np.percentile(lat, 50)), 2),
                "p95": round(float(np.percentile(lat, 95)), 2),
            },
            "mean_tokens_at_10": round(float(np.mean(self.tokens_at_10 or [0])), 1),
        }


def evaluate_conversation(
    conversation: Conversation,
    tenant: Tenant,
    dia_to_turn: dict[str, int],
    report: Report,
    now: datetime,
    limit: int = 10,
    weights: RetrievalWeights | None = None,
) -> None:
    episode_turns: dict[int, set[int]] = defaultdict(set)
    for turn_id, episode_id in Turn.objects.filter(tenant=tenant).values_list("pk", "episode_id"):
        episode_turns[episode_id].add(turn_id)
    layer_of_turn = {
        t: layer for t, layer in Turn.objects.filter(tenant=tenant).values_list("pk", "episode__layer")
    }
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
            query=SearchQuery(text=question["question"], limit=limit, record_access=False),
            now=now,
            weights=weights,
        )
        report.latencies_ms.append((time.perf_counter() - started) * 1000)
        items = [{key} if kind == "turn" else episode_turns[key] for kind, key, _ in result.ranked_items()]
        scores = score_ranking(items, evidence)
        report.per_category[CATEGORIES[question["category"]]].add(scores)
        layers = {layer_of_turn[t] for t in evidence}
        report.per_layer["+".join(sorted(layers))].add(scores)
        report.tokens_at_10.append(_tokens(result.hits[:10]))


def _tokens(hits: list[Any]) -> int:
    total = 0
    for hit in hits:
        episode: Episode = hit.episode
        if episode.layer == "hot":
            total += max(1, episode.raw_chars // 4)  # every turn is returned whole
        elif episode.layer == "warm":
            total += estimate_tokens(episode.summary + " ".join(episode.key_points))
        else:
            total += estimate_tokens(episode.headline + " ".join(episode.keywords))
    return total


def run(
    path: Path,
    *,
    log: Callable[[str], None],
    keep: bool = False,
    age: Callable[[Tenant, Conversation, datetime], None] | None = None,
    limit_conversations: int | None = None,
    weights: RetrievalWeights | None = None,
) -> dict[str, Any]:
    conversations = load(path)[:limit_conversations]
    report = Report()
    tenants: list[Tenant] = []
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
            report.turns += len(dia_to_turn)
            if age is not None:
                age(tenant, conversation, now)
            log(f"{conversation.sample_id}: {len(conversation.questions)} questions")
            evaluate_conversation(conversation, tenant, dia_to_turn, report, now, weights=weights)
            report.conversations += 1
    finally:
        if not keep:
            for tenant in tenants:
                tenant.delete()  # its hot documents and index go with it
    return report.as_dict()


def format_report(result: dict[str, Any], title: str = "LoCoMo retrieval") -> str:
    header = f"{'':<22}{'n':>5}{'R@5':>8}{'R@10':>8}{'ES@5':>8}{'ES@10':>8}{'MRR':>8}{'nDCG@10':>9}"
    lines = [
        f"{title}: {result['conversations']} conversations, {result['turns']} turns, "
        f"{result['questions']} questions ({result['skipped_no_evidence']} without usable evidence)",
        header,
    ]

    def row(name: str, s: dict[str, Any]) -> str:
        if not s.get("n"):
            return f"{name:<22}{0:>5}"
        return (
            f"{name:<22}{s['n']:>5}{s['recall5']:>8.3f}{s['recall10']:>8.3f}{s['share5']:>8.3f}"
            f"{s['share10']:>8.3f}{s['mrr']:>8.3f}{s['ndcg10']:>9.3f}"
        )

    for name, s in result["per_category"].items():
        lines.append(row(name, s))
    lines.append(row("overall (1-4)", result["overall"]))
    if len(result["per_layer"]) > 1 or "hot" not in result["per_layer"]:
        lines.append("by tier of the gold evidence:")
        for name, s in result["per_layer"].items():
            lines.append(row(f"  {name}", s))
    lines.append(
        f"search latency p50 {result['latency_ms']['p50']} ms, p95 {result['latency_ms']['p95']} ms; "
        f"mean tokens returned at k=10: {result['mean_tokens_at_10']}"
    )
    return "\n".join(lines)
