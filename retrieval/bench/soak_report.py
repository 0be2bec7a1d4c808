"""`bench soak`'s table and its verdict: did anything grow over the last half of the run?

The rule (also in `manage.py bench --help` and docs/benchmarks.md): over the samples taken in the
last half of the run (from the middle on), a least-squares line per metric; the metric grows when
that line rises, from the window's first sample to its last, by more than ``TOLERANCE`` of the
metric's mean over the window and by more than the metric's floor (its noise on a quiet machine).
A line needs two samples: with fewer the verdict says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

#: The share of its mean a metric may rise by over the last half before it counts as growing.
TOLERANCE = 0.2


class Metric(NamedTuple):
    key: str
    label: str
    read: Callable[[dict[str, Any]], float | None]
    #: A rise below this is noise whatever the mean (a few ms of p95, a few MB of RSS).
    floor: float


def _redisearch(field: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda s: (s["redisearch"] or {}).get(field)


METRICS = (
    Metric("search_p95_ms", "search p95 ms", lambda s: s["search_p95_ms"], 5.0),
    Metric("self_mb", "this process MB (RSS)", lambda s: s["memory"]["self_mb"], 20.0),
    Metric("redis_mb", "Redis MB (RSS)", lambda s: s["memory"]["redis_mb"], 10.0),
    Metric("postgres_mb", "Postgres MB (PSS)", lambda s: s["memory"]["postgres_mb"], 20.0),
    Metric("dead_tuples", "Postgres dead tuples", lambda s: s["dead_tuples"]["total"], 1000.0),
    Metric("gin_pending_pages", "GIN pending pages", lambda s: s["gin"]["pending_pages"], 10.0),
    Metric("gin_mb", "GIN indexes MB", lambda s: s["gin"]["size_mb"], 1.0),
    Metric("hnsw_mb", "HNSW graphs MB", lambda s: s["hnsw"]["size_mb"], 1.0),
    Metric("index_bytes_per_doc", "RediSearch bytes/doc", _redisearch("bytes_per_doc"), 100.0),
    Metric("entries_per_doc", "RediSearch entries/doc", _redisearch("entries_per_doc"), 1.0),
)


def verdict(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each metric's line over the samples from the run's middle on: its rise, the rise it may
    have, and whether it grows; ``grows`` names those that do."""
    end = samples[-1]["minute"] if samples else 0.0
    window = [s for s in samples if s["minute"] >= end / 2]
    metrics: dict[str, Any] = {}
    for metric in METRICS:
        points = [(s["minute"], metric.read(s)) for s in window]
        xs = [x for x, y in points if y is not None]
        ys = [float(y) for x, y in points if y is not None]
        if len(xs) < 2 or xs[-1] == xs[0]:
            metrics[metric.key] = {"label": metric.label, "samples": len(xs), "grows": None}
            continue
        slope = float(np.polyfit(xs, ys, 1)[0])
        rise = slope * (xs[-1] - xs[0])
        limit = max(TOLERANCE * abs(float(np.mean(ys))), metric.floor)
        metrics[metric.key] = {
            "label": metric.label,
            "samples": len(xs),
            "first": ys[0],
            "last": ys[-1],
            "rise": round(rise, 2),
            "limit": round(limit, 2),
            "grows": rise > limit,
        }
    return {
        "window_minutes": [window[0]["minute"], end] if window else [],
        "metrics": metrics,
        "grows": [key for key, m in metrics.items() if m["grows"]],
        "unjudged": [key for key, m in metrics.items() if m["grows"] is None],
    }


def _n(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


#: (header, width, the cell of a sample)
COLUMNS: tuple[tuple[str, int, Callable[[dict[str, Any]], str]], ...] = (
    ("min", 6, lambda s: f"{s['minute']:.2f}"),
    ("day", 6, lambda s: f"{s['simulated_day']:.1f}"),
    ("ingest", 7, lambda s: str(s["ops"]["ingest"])),
    ("turns", 7, lambda s: str(s["ops"]["turns"])),
    ("search", 7, lambda s: str(s["ops"]["search"])),
    ("unpack", 7, lambda s: str(s["ops"]["unpack"])),
    ("forget", 7, lambda s: str(s["ops"]["forget"])),
    ("tick", 5, lambda s: str(s["ops"]["tick"])),
    ("err", 5, lambda s: str(sum(s["errors"].values()))),
    ("degr", 5, lambda s: str(s["degraded"])),
    ("p95 ms", 8, lambda s: _n(s["search_p95_ms"], 1)),
    ("self MB", 8, lambda s: _n(s["memory"]["self_mb"])),
    ("redis MB", 9, lambda s: _n(s["memory"]["redis_mb"])),
    ("pg MB", 7, lambda s: _n(s["memory"]["postgres_mb"])),
    ("dead tup", 9, lambda s: _n(s["dead_tuples"]["total"])),
    ("GIN MB", 7, lambda s: _n(s["gin"]["size_mb"], 1)),
    ("GIN pend", 9, lambda s: _n(s["gin"]["pending_pages"])),
    ("HNSW MB", 8, lambda s: _n(s["hnsw"]["size_mb"], 1)),
    ("FT docs", 8, lambda s: _n((s["redisearch"] or {}).get("docs"))),
    ("FT B/doc", 9, lambda s: _n((s["redisearch"] or {}).get("bytes_per_doc"))),
    ("ent/doc", 8, lambda s: _n((s["redisearch"] or {}).get("entries_per_doc"), 1)),
    ("h/w/c/f episodes", 22, lambda s: "/".join(str(n) for n in s["episodes"].values())),
)


def header() -> str:
    return "".join(f"{name:>{width}}" for name, width, _ in COLUMNS) + "  most dead tuples"


def row(sample: dict[str, Any]) -> str:
    top = ", ".join(f"{name} {n:,}" for name, n in sample["dead_tuples"]["top"])
    return "".join(f"{cell(sample):>{width}}" for _, width, cell in COLUMNS) + f"  {top}"


def format_verdict(result: dict[str, Any]) -> str:
    judged = result["verdict"]
    window = judged["window_minutes"]
    lines = [
        f"growth over the last half (minutes {window[0]:.2f}-{window[1]:.2f}; a metric grows when its "
        f"least-squares line rises by more than {TOLERANCE:.0%} of its mean there and more than its floor):"
        if window
        else "no samples: nothing judged",
    ]
    for metric in judged["metrics"].values():
        if metric["grows"] is None:
            lines.append(f"  {metric['label']:<24} not judged ({metric['samples']} sample(s) with a value)")
            continue
        lines.append(
            f"  {metric['label']:<24} {metric['first']:>12,.1f} -> {metric['last']:>12,.1f}  line rises "
            f"{metric['rise']:>10,.1f} (may {metric['limit']:,.1f})  {'GROWS' if metric['grows'] else 'steady'}"
        )
    restart = result["restart"]
    if restart is not None:
        lines.append(
            f"Redis restart at minute {restart['minute']:.2f}: stopped in {restart['stop_s']} s, down "
            f"{restart['down_s']} s, started in {restart['start_s']} s; meanwhile {restart['searches']} "
            f"search(es), {restart['degraded']} degraded, {restart['errors']} error(s)"
            + (f"; FAILED: {restart['error']}" if restart.get("error") else "")
        )
    totals = result["totals"]
    lines.append(f"operations: {totals['ops']}; errors: {totals['errors'] or 'none'}")
    lines.append(f"GIN: {result['gin_support']}")
    grows = judged["grows"]
    lines.append(
        "verdict: GROWS: " + ", ".join(judged["metrics"][k]["label"] for k in grows)
        if grows
        else "verdict: nothing grew over the last half"
        + (f" (not judged: {', '.join(judged['unjudged'])})" if judged["unjudged"] else "")
    )
    return "\n".join(lines)
