"""The Chinese and Russian set behind `manage.py evaluate multilingual`.

Written for the project (``data/multilingual.json``, LoCoMo's shape with a ``language`` per
conversation and a ``match`` per question: how the question's words meet its evidence's —
``inflected``/``exact`` in Russian, ``unsegmented``/``latin`` in Chinese, ``none`` for a paraphrase).
Every question runs twice through the search service: on the full-text lists alone (the analysers)
and on the fused ranking. Recall(any)@5/@10 and MRR over turns, per language and per match.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import locomo
from .metrics import TURN_METRICS, scheduler_note

DATA = Path(__file__).parent / "data" / "multilingual.json"
RUNS = ("text_only", "fused")


def group(conversation: locomo.Conversation, question: dict[str, Any]) -> str:
    return f"{conversation.language} {question.get('match', '')}".strip()


def run(
    path: Path, *, log: Callable[[str], None], keep: bool = False, limit_conversations: int | None = None
) -> dict[str, Any]:
    return {
        name: locomo.run(
            path,
            log=log,
            keep=keep,
            limit_conversations=limit_conversations,
            group=group,
            text_only=name == "text_only",
        )
        for name in RUNS
    }


def per_language(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The report's rows (one per language and match) merged per language, weighted by questions."""
    merged: dict[str, dict[str, float]] = {}
    for name, row in result["per_category"].items():
        if not row.get("n"):
            continue
        into = merged.setdefault(name.split()[0], {"n": 0, **dict.fromkeys(TURN_METRICS, 0.0)})
        into["n"] += row["n"]
        for metric in TURN_METRICS:
            into[metric] += row[metric] * row["n"]
    return {
        language: {"n": row["n"], **{m: round(row[m] / row["n"], 4) for m in TURN_METRICS}}
        for language, row in sorted(merged.items())
    }


def format_report(results: dict[str, Any]) -> str:
    lines = [
        f"{results['fused']['conversations']} conversations, {results['fused']['questions']} questions; "
        "turns: Recall(any)@5, Recall(any)@10, MRR",
        f"{'':<22}{'n':>5}{'text R@5':>10}{'R@10':>7}{'MRR':>7}{'fused R@5':>11}{'R@10':>7}{'MRR':>7}",
    ]
    text, fused = results["text_only"], results["fused"]
    rows = [(name, per_language(text)[name], per_language(fused)[name]) for name in per_language(fused)]
    rows += [
        (f"  {name}", text["per_category"][name], row)
        for name, row in fused["per_category"].items()
        if row.get("n")
    ]
    for name, t, f in rows:
        lines.append(
            f"{name:<22}{f['n']:>5}{t['recall5']:>10.3f}{t['recall10']:>7.3f}{t['mrr']:>7.3f}"
            f"{f['recall5']:>11.3f}{f['recall10']:>7.3f}{f['mrr']:>7.3f}"
        )
    # All hot, as the table says, unless a running scheduler (``make run``) moved its tenants.
    lines += [f"{run.replace('_', ' ')}: {note}" for run in RUNS if (note := scheduler_note(results[run]))]
    return "\n".join(lines)
