"""`evaluate locomo --age`: let a conversation age through the lifecycle, then measure compression.

The harness ingests every session at the first session's date, so each episode starts as if it had
just been used. ``age_conversation`` instead treats each episode as last used when it happened, then
runs the tenant's ticks on the way to ``now`` (the day after each session, then ``now`` itself), so
at ``now`` older sessions sit in warm and cold as the tenant's policy says (hot_days, cold_days) and
the warm gradient has been applied. The compression of each packed episode is then measured against
the compression targets (docs/concepts.md#layers): hot -> warm 3-10x smaller, warm -> cold 10-20x smaller, entities
and decisions 100% kept in warm.
"""

from __future__ import annotations

import statistics
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F

from episodes.models import Episode, Layer
from lifecycle.compression import ColdShape, WarmShape
from lifecycle.tick import STEPS, tick_run
from memory_platform.tenancy.models import Tenant

TARGETS = {"hot_to_warm": (3.0, 10.0), "warm_to_cold": (10.0, 20.0)}

#: Every step of the tick but the purge (nothing is forgotten here): as the scheduler would run
#: them. With no accesses and few links most aged episodes turn dormant; search still reaches
#: them, ranked by the same rule for all (``retrieval.ranking.STATE_WEIGHTS``).
AGING_STEPS = tuple(step for step in STEPS if step != "purge")


def _kept(items: list[str], text: str) -> tuple[int, int]:
    lowered = text.lower()
    return sum(1 for item in items if item.lower() in lowered), len(items)


def age_conversation(tenant: Tenant, conversation: Any, now: datetime) -> dict[str, Any]:
    """Tick the tenant's memory forward to ``now``; return per-episode compression statistics."""
    episodes = Episode.objects.filter(tenant=tenant)
    # As if each episode was last used when it happened (not when the harness ingested it).
    episodes.update(last_accessed_at=F("last_occurred_at"), version=F("version") + 1)
    hot_shape = {
        pk: (list(entities), list(decisions))
        for pk, entities, decisions in episodes.values_list("pk", "entities", "decisions")
    }
    moments = sorted(
        {date + timedelta(days=1) for _, date, _ in conversation.sessions if date + timedelta(days=1) < now}
    )
    runs = [tick_run(tenant=tenant, now=moment, steps=AGING_STEPS) for moment in [*moments, now]]

    stats = []
    for episode in Episode.objects.filter(tenant=tenant).order_by("pk"):
        row: dict[str, Any] = {
            "episode": episode.pk,
            "session": episode.session_id,
            "layer": episode.layer,
            "raw_chars": episode.raw_chars,
        }
        if episode.layer != Layer.HOT:
            warm = WarmShape(episode.summary, episode.key_points, episode.entities, episode.decisions).text()
            entities, decisions = hot_shape.get(episode.pk, ([], []))
            row.update(
                warm_chars=len(warm),
                hot_to_warm=episode.raw_chars / max(1, len(warm)),
                entities=_kept(entities, warm),
                decisions=_kept(decisions, warm),
            )
            if episode.layer == Layer.COLD:
                cold = ColdShape(episode.headline, episode.keywords).text()
                row.update(cold_chars=len(cold), warm_to_cold=len(warm) / max(1, len(cold)))
        stats.append(row)
    return {
        "sample_id": getattr(conversation, "sample_id", ""),
        "now": now.isoformat(),
        "ticks": len(runs),
        "tick_errors": sum(len(run.errors) for run in runs),
        "layers": dict(Counter(row["layer"] for row in stats)),
        "episodes": stats,
    }


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "mean": round(statistics.fmean(values), 2),
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def _share(pairs: list[tuple[int, int]]) -> dict[str, float]:
    kept = sum(k for k, _ in pairs)
    total = sum(n for _, n in pairs)
    per_episode = [k / n for k, n in pairs if n]
    return {
        "kept": kept,
        "total": total,
        "share": round(kept / total, 4) if total else 1.0,
        "worst_episode": round(min(per_episode), 4) if per_episode else 1.0,
    }


def compression_report(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate ``age_conversation`` results (one per conversation) into ratios and shares kept."""
    rows = [row for conversation in stats for row in conversation["episodes"]]
    packed = [row for row in rows if row["layer"] != Layer.HOT]
    return {
        "conversations": len(stats),
        "episodes": len(rows),
        "layers": dict(Counter(row["layer"] for row in rows)),
        "tick_errors": sum(conversation.get("tick_errors", 0) for conversation in stats),
        "hot_to_warm": _summary([row["hot_to_warm"] for row in packed]),
        "warm_to_cold": _summary([row["warm_to_cold"] for row in packed if "warm_to_cold" in row]),
        "entities_in_warm": _share([row["entities"] for row in packed]),
        "decisions_in_warm": _share([row["decisions"] for row in packed]),
        "targets": {name: list(bounds) for name, bounds in TARGETS.items()},
    }


def format_compression(report: dict[str, Any]) -> str:
    layers = ", ".join(f"{name} {n}" for name, n in sorted(report["layers"].items()))
    lines = [
        f"Compression after aging: {report['conversations']} conversations, {report['episodes']} episodes "
        f"({layers}); tick errors: {report['tick_errors']}",
        f"{'ratio (x smaller)':<22}{'n':>6}{'mean':>8}{'median':>8}{'min':>8}{'max':>8}{'target':>10}",
    ]
    for name in ("hot_to_warm", "warm_to_cold"):
        s = report[name]
        low, high = report["targets"][name]
        target = f"{low:g}-{high:g}x"
        if not s.get("n"):
            lines.append(f"{name.replace('_', ' -> '):<22}{0:>6}{'':>32}{target:>10}")
            continue
        lines.append(
            f"{name.replace('_to_', ' -> '):<22}{s['n']:>6}{s['mean']:>8.2f}{s['median']:>8.2f}"
            f"{s['min']:>8.2f}{s['max']:>8.2f}{target:>10}"
        )
    lines.append(f"{'kept in warm':<22}{'kept':>6}{'total':>8}{'share':>8}{'worst':>8}{'target':>10}")
    for name in ("entities_in_warm", "decisions_in_warm"):
        s = report[name]
        label = name.split("_")[0]
        lines.append(
            f"{label:<22}{s['kept']:>6}{s['total']:>8}{s['share']:>8.1%}{s['worst_episode']:>8.1%}{'100%':>10}"
        )
    return "\n".join(lines)
