"""What `evaluate` counts for one question, and the means over many.

Two views of the same ranked answer:

- **turns** (``score_ranking``): one item per matched turn of a hot hit, one per warm or cold hit
  (which carries every turn of its episode). Recall(any)@k, evidence share ES@k, MRR, nDCG@10.
- **episodes** (``score_episodes``): one item per returned hit, whatever its layer; an item is
  relevant when its episode holds an evidence turn. Recall@3/@5/@10 and MRR. This compares like with
  like between an all-hot and an aged run, where the turn view lets a packed episode count all of
  its turns at once.

And what the agent reads (``Read``): whether an evidence turn's text is among the turns the
default answer shows (shown@5, shown@10: the first 5 or 10 results of ``POST /search`` at limit 10,
``view=compact``), and in the text ``POST /context`` writes at 500 and 1,000 tokens. Tokens are
counted on the answer's JSON (the ``results``, as an agent would put them in its prompt) and on the
context's text, with the WordPiece tokenizer of the local embedding model (all-MiniLM-L6-v2's,
uncased BERT vocabulary), untruncated.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TURN_METRICS = ("recall5", "recall10", "share5", "share10", "mrr", "ndcg10")
EPISODE_METRICS = ("recall3", "recall5", "recall10", "mrr")
TOKENIZER = "WordPiece of all-MiniLM-L6-v2 (uncased BERT vocabulary)"
#: The budgets ``evaluate`` asks ``/context`` for.
CONTEXT_BUDGETS = (500, 1000)


def score_ranking(items: list[set[int]], evidence: set[int]) -> dict[str, float]:
    """Turn view of one question. ``items``: the ranked list, each item the turn ids it carries."""
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


def score_episodes(episodes: list[set[int]], evidence: set[int]) -> dict[str, float]:
    """Episode view of one question. ``episodes``: the returned hits in order, each its turn ids."""
    relevant = [bool(turns & evidence) for turns in episodes]
    first = next((i for i, r in enumerate(relevant) if r), None)
    return {
        "recall3": float(any(relevant[:3])),
        "recall5": float(any(relevant[:5])),
        "recall10": float(any(relevant[:10])),
        "mrr": 1.0 / (first + 1) if first is not None else 0.0,
    }


@dataclass
class Means:
    """Sums of per-question metrics, and their means."""

    names: tuple[str, ...]
    n: int = 0
    sums: dict[str, float] = field(default_factory=dict)

    def add(self, scores: dict[str, float]) -> None:
        self.n += 1
        for name in self.names:
            self.sums[name] = self.sums.get(name, 0.0) + scores[name]

    def merge(self, other: Means) -> None:
        self.n += other.n
        for name in self.names:
            self.sums[name] = self.sums.get(name, 0.0) + other.sums.get(name, 0.0)

    def mean(self) -> dict[str, float]:
        if not self.n:
            return {"n": 0}
        return {"n": self.n, **{k: round(self.sums.get(k, 0.0) / self.n, 4) for k in self.names}}


@functools.cache
def _tokenizer() -> Any:
    from tokenizers import Tokenizer

    from memory_platform.embeddings.local import model_dir

    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def count_tokens(results: Sequence[Mapping[str, Any]] | str) -> int:
    """Tokens of an answer's results as JSON, or of a text (``TOKENIZER``)."""
    text = results if isinstance(results, str) else json.dumps(results, ensure_ascii=False, default=str)
    return len(_tokenizer().encode(text, add_special_tokens=False).ids)


@dataclass
class Read:
    """What one question's answers showed the agent: whether an evidence turn's text was among the
    first 5 and 10 search results and in the context at each budget, and the tokens each took."""

    category: str
    shown5: bool
    shown10: bool
    tokens10: int
    context: dict[int, tuple[bool, int]]  # budget -> (evidence in the text, tokens of the text)


def _percentiles(values: list[int]) -> dict[str, int]:
    array = np.array(values or [0])
    return {"median": int(np.percentile(array, 50)), "p95": int(np.percentile(array, 95))}


def read_means(reads: list[Read]) -> dict[str, Any]:
    """The shares and tokens of ``reads`` (one group of questions)."""
    if not reads:
        return {"n": 0}
    out: dict[str, Any] = {
        "n": len(reads),
        "shown5": round(float(np.mean([r.shown5 for r in reads])), 3),
        "shown10": round(float(np.mean([r.shown10 for r in reads])), 3),
        "tokens10": _percentiles([r.tokens10 for r in reads]),
    }
    for budget in sorted({b for r in reads for b in r.context}):
        held = [r.context[budget] for r in reads if budget in r.context]
        out[f"context{budget}"] = round(float(np.mean([h for h, _ in held])), 3)
        out[f"context{budget}_tokens"] = _percentiles([t for _, t in held])
    return out


@dataclass
class Report:
    turns: dict[str, Means] = field(default_factory=lambda: defaultdict(lambda: Means(TURN_METRICS)))
    episodes: dict[str, Means] = field(default_factory=lambda: defaultdict(lambda: Means(EPISODE_METRICS)))
    per_layer: dict[str, Means] = field(default_factory=lambda: defaultdict(lambda: Means(TURN_METRICS)))
    latencies_ms: list[float] = field(default_factory=list)
    #: Per question: what the answers showed the agent (``Read``).
    reads: list[Read] = field(default_factory=list)
    skipped: int = 0
    conversations: int = 0
    turn_count: int = 0

    def add(self, category: str, layers: str, turns: dict[str, float], episodes: dict[str, float]) -> None:
        self.turns[category].add(turns)
        self.episodes[category].add(episodes)
        self.per_layer[layers].add(turns)

    def as_dict(self) -> dict[str, Any]:
        overall, overall_episodes = Means(TURN_METRICS), Means(EPISODE_METRICS)
        for means in self.turns.values():
            overall.merge(means)
        for means in self.episodes.values():
            overall_episodes.merge(means)
        lat = np.array(self.latencies_ms or [0.0])
        tokens = np.array([r.tokens10 for r in self.reads] or [0])
        categories = sorted({r.category for r in self.reads})
        return {
            "conversations": self.conversations,
            "turns": self.turn_count,
            "questions": overall.n,
            "skipped_no_evidence": self.skipped,
            "per_category": {name: self.turns[name].mean() for name in sorted(self.turns)},
            "per_layer": {name: self.per_layer[name].mean() for name in sorted(self.per_layer)},
            "overall": overall.mean(),
            "episodes": {
                "per_category": {name: self.episodes[name].mean() for name in sorted(self.episodes)},
                "overall": overall_episodes.mean(),
            },
            "latency_ms": {
                "p50": round(float(np.percentile(lat, 50)), 2),
                "p95": round(float(np.percentile(lat, 95)), 2),
            },
            "tokens_at_10": {
                "median": int(np.percentile(tokens, 50)),
                "p95": int(np.percentile(tokens, 95)),
                "tokenizer": TOKENIZER,
            },
            "evidence_shown_at_10": read_means(self.reads).get("shown10", 0.0),
            "read": {
                "per_category": {
                    c: read_means([r for r in self.reads if r.category == c]) for c in categories
                },
                "overall": read_means(self.reads),
            },
        }


def format_report(result: dict[str, Any], title: str) -> str:
    lines = [
        f"{title}: {result['conversations']} conversations, {result['turns']} turns, "
        f"{result['questions']} questions ({result['skipped_no_evidence']} without usable evidence)",
        "turns (one item per matched hot turn, one per warm or cold hit):",
        f"{'':<22}{'n':>5}{'R@5':>8}{'R@10':>8}{'ES@5':>8}{'ES@10':>8}{'MRR':>8}{'nDCG@10':>9}",
    ]

    def row(name: str, s: dict[str, Any], names: tuple[str, ...], widths: tuple[int, ...]) -> str:
        if not s.get("n"):
            return f"{name:<22}{0:>5}"
        return f"{name:<22}{s['n']:>5}" + "".join(
            f"{s[k]:>{w}.3f}" for k, w in zip(names, widths, strict=True)
        )

    turn_widths = (8, 8, 8, 8, 8, 9)
    for name, s in result["per_category"].items():
        lines.append(row(name, s, TURN_METRICS, turn_widths))
    lines.append(row("overall (1-4)", result["overall"], TURN_METRICS, turn_widths))
    if len(result["per_layer"]) > 1 or "hot" not in result["per_layer"]:
        lines.append("by tier of the gold evidence:")
        for name, s in result["per_layer"].items():
            lines.append(row(f"  {name}", s, TURN_METRICS, turn_widths))
    lines.append("episodes (one item per returned hit, any layer):")
    lines.append(f"{'':<22}{'n':>5}{'R@3':>8}{'R@5':>8}{'R@10':>8}{'MRR':>8}")
    for name, s in result["episodes"]["per_category"].items():
        lines.append(row(name, s, EPISODE_METRICS, (8, 8, 8, 8)))
    lines.append(row("overall (1-4)", result["episodes"]["overall"], EPISODE_METRICS, (8, 8, 8, 8)))
    tokens = result["tokens_at_10"]
    lines.append(
        f"search latency p50 {result['latency_ms']['p50']} ms, p95 {result['latency_ms']['p95']} ms; "
        f"tokens returned at limit 10: median {tokens['median']}, p95 {tokens['p95']} "
        f"({tokens['tokenizer']}, on the results' JSON); an evidence turn's text among them: "
        f"{result['evidence_shown_at_10']:.3f} of questions"
    )
    lines.extend(format_read(result))
    ticked = scheduler_note(result)
    if ticked:
        lines.append(ticked)
    return "\n".join(lines)


def format_read(result: dict[str, Any]) -> list[str]:
    """What the agent read: the evidence among the shown turns and in the context, with tokens."""
    read = result.get("read")
    if not read or not read["overall"].get("n"):
        return []
    budgets = sorted(int(k[7:]) for k in read["overall"] if k.startswith("context") and k[7:].isdigit())
    header = f"{'':<22}{'n':>5}{'shown@5':>9}{'shown@10':>10}{'tokens':>13}"
    header += "".join(f"{f'ctx@{b}':>10}{'tokens':>13}" for b in budgets)
    lines = ["what the agent reads (an evidence turn's text in the answer; tokens median/p95):", header]

    def row(name: str, s: dict[str, Any]) -> str:
        if not s.get("n"):
            return f"{name:<22}{0:>5}"
        tokens = s["tokens10"]
        line = f"{name:<22}{s['n']:>5}{s['shown5']:>9.3f}{s['shown10']:>10.3f}"
        line += f"{tokens['median']:>7}/{tokens['p95']:<5}"
        for b in budgets:
            t = s[f"context{b}_tokens"]
            line += f"{s[f'context{b}']:>10.3f}{t['median']:>7}/{t['p95']:<5}"
        return line

    for name, s in read["per_category"].items():
        lines.append(row(name, s))
    lines.append(row("overall (1-4)", read["overall"]))
    return lines


def scheduler_note(result: dict[str, Any]) -> str:
    """What a running scheduler did to a run's tenants ("" when it left them alone)."""
    ticked = result.get("scheduled_ticks", {})
    if not ticked.get("runs"):
        return ""
    return (
        f"a running scheduler also ticked these tenants {ticked['runs']} time(s) at the real date during "
        f"the run, moving {ticked['moved']} episode(s) between layers or states: these figures are not "
        "of the layers the heading names"
    )


def format_drop(all_hot: dict[str, Any], aged: dict[str, Any]) -> str:
    """What ageing cost, aged minus all hot."""

    def delta(a: float, b: float) -> str:
        return f"{b - a:+.3f}"

    e0, e1 = all_hot["episodes"]["overall"], aged["episodes"]["overall"]
    t0, t1 = all_hot["overall"], aged["overall"]
    return (
        f"aged - all hot: episode R@10 {delta(e0['recall10'], e1['recall10'])}, "
        f"episode MRR {delta(e0['mrr'], e1['mrr'])}; turn R@10 {delta(t0['recall10'], t1['recall10'])}, "
        f"turn MRR {delta(t0['mrr'], t1['mrr'])}; median tokens at 10 "
        f"{all_hot['tokens_at_10']['median']} -> {aged['tokens_at_10']['median']}; "
        f"shown@10 {delta(all_hot['evidence_shown_at_10'], aged['evidence_shown_at_10'])}"
        + "".join(
            f"; context@{b} {delta(all_hot['read']['overall'][f'context{b}'], aged['read']['overall'][f'context{b}'])}"
            for b in CONTEXT_BUDGETS
            if f"context{b}" in all_hot.get("read", {}).get("overall", {})
        )
    )
