"""The processor time a measured loop costs, by process: the platform's Python (this process, with
the model's threads when it embeds, or the web server the HTTP paths ask), the embedded Postgres
(the postmaster and its backends) and the embedded Redis; for `bench search`
(docs/benchmarks.md#processor-time).

Latency alone hides what a search costs the machine: the platform asks Redis and Postgres at once,
so its wall time can sit below the sum of its parts, and every part waits for a core when they are
all busy. Processor time per search adds up what every process spent, and on a machine of ``n``
cores no search answers faster, over a run of them, than that sum divided by ``n``.

A server that is not embedded (``REDIS_URL`` or ``DATABASE_URL`` elsewhere) cannot be read from
here: its figure is None, never a guess.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil

from .processes import embedded_pid, tree

PARTS = ("python", "postgres", "redis")
T = TypeVar("T")


@dataclass(frozen=True)
class Reading:
    """Processor seconds (user and system) spent so far, by process; None where it cannot be read."""

    python: float | None
    postgres: float | None
    redis: float | None


def _seconds(process: psutil.Process) -> float:
    """Processor seconds of one process, all its threads. Linux's scheduler counts them in
    nanoseconds (``schedstat``); the user and system times of ``/proc/PID/stat`` only in clock
    ticks (10 ms), coarser than a search."""
    try:
        return (
            sum(
                int(stat.read_text().split()[0])
                for stat in Path(f"/proc/{process.pid}/task").glob("*/schedstat")
            )
            / 1e9
        )
    except (OSError, ValueError, IndexError):
        times = process.cpu_times()
        return float(times.user + times.system)


def _tree_seconds(pid: int | None) -> float | None:
    """The process and its children, those running and those that ended: a web server's connection
    that has reached its age (``CONN_MAX_AGE``) ends with its Postgres backend, whose time the
    postmaster then counts among its ended children's (in clock ticks)."""
    processes = tree(pid)
    if processes is None:
        return None
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += _seconds(process) + times.children_user + times.children_system
        except psutil.Error:
            continue  # ended meanwhile: its parent counts it from now on
    return total


def read(platform: int | None = None) -> Reading:
    """``platform``: the process (with its children) that runs the platform's Python, when not this
    one (the web server of the HTTP paths)."""
    if platform is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        python: float | None = usage.ru_utime + usage.ru_stime
    else:
        python = _tree_seconds(platform)
    return Reading(
        python=python,
        postgres=_tree_seconds(embedded_pid("EMBEDDED_POSTGRES")),
        redis=_tree_seconds(embedded_pid("EMBEDDED_REDIS")),
    )


def per_call(before: Reading, after: Reading, calls: int) -> dict[str, float | None]:
    """Milliseconds per call, by process, and their ``total`` (None when a server's was unreadable)."""
    spent: dict[str, float | None] = {}
    for part in PARTS:
        start, end = getattr(before, part), getattr(after, part)
        spent[part] = None if start is None or end is None else round((end - start) * 1000 / calls, 2)
    known = [value for value in spent.values() if value is not None]
    spent["total"] = round(sum(known), 2) if len(known) == len(PARTS) else None
    return spent


def measured(
    calls: int, run: Callable[..., T], *args: Any, platform: int | None = None
) -> tuple[T, dict[str, float | None]]:
    """``run(*args)`` (a loop of ``calls`` calls): what it returned, and what it cost per call
    (``per_call``); ``platform`` as ``read`` takes it."""
    before = read(platform)
    result = run(*args)
    return result, per_call(before, read(platform), calls)


def summed(parts: list[dict[str, float | None]]) -> dict[str, float | None]:
    """Parts measured apart (``per_call`` each) as one: by process, and the total."""
    return {
        part: None if any(p[part] is None for p in parts) else round(sum(p[part] or 0.0 for p in parts), 2)
        for part in (*PARTS, "total")
    }


def compared(spent: dict[str, float | None], floor: dict[str, float | None]) -> dict[str, Any]:
    """A path's processor time beside the floor's: ``cpu_ms`` and ``floor_cpu_ms`` (by process and
    in total), their ratio, and ``cpu_bound_ms``: the total over the cores this process may run
    on, below which no run of such searches can average."""
    total, floor_total = spent["total"], floor["total"]
    return {
        "cpu_ms": spent,
        "floor_cpu_ms": floor,
        "cpu_ratio_to_floor": round(total / floor_total, 2) if total is not None and floor_total else None,
        "cpu_bound_ms": round(total / cores(), 2) if total is not None else None,
    }


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))
