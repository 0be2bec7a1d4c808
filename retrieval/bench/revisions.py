"""`bench search --against REV`: this tree's search and another revision's, over HTTP, query by query.

Whether a change made search slower cannot be told from two runs of `bench search`: on these shared
machines the same path's p95 moves by more between two runs a quarter of an hour apart than most
changes move it. Here two web servers answer at once on the same tenant, one running this tree's
code and one running REV's (checked out into a temporary worktree), and each query is asked of
both in turn, in alternating order, so both sets of timings share every moment's load. Besides
each one's percentiles, the paired difference: the median of (this tree - REV) over the queries,
with a bootstrap 95% interval; an interval that holds 0 says the two cannot be told apart.

Both servers use this process's database and Redis, so REV must have the same migrations as this
tree (it is refused otherwise).
"""

from __future__ import annotations

import contextlib
import http.client
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

#: Resamples of the bootstrap interval of the paired median.
RESAMPLES = 2000


class RevisionError(ValueError):
    """REV cannot be compared with this tree (unknown, or other migrations)."""


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RevisionError(done.stderr.strip() or f"git {' '.join(args)} failed")
    return done.stdout.strip()


@contextlib.contextmanager
def checkout(rev: str, log: Callable[[str], None]) -> Iterator[tuple[Path, str]]:
    """REV's code in a temporary worktree, removed after the block: (its root, its short name)."""
    root = Path(settings.BASE_DIR)
    try:
        commit = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except RevisionError:
        raise RevisionError(f"no such revision here: {rev}") from None
    migrations = _git(root, "diff", "--name-only", commit, "--", ":(glob)**/migrations/**")
    if migrations:
        changed = migrations.splitlines()
        raise RevisionError(
            f"{rev} has other migrations than this tree ({len(changed)} file(s), {changed[0]} first): "
            "both servers use one database, so it cannot be compared"
        )
    short = _git(root, "rev-parse", "--short", commit)
    where = Path(tempfile.mkdtemp(prefix="bench-against-"))
    log(f"  checking out {rev} ({short}) into {where}")
    _git(root, "worktree", "add", "--detach", "--force", str(where), commit)
    try:
        yield where, short
    finally:
        try:
            _git(root, "worktree", "remove", "--force", str(where))
        except RevisionError:
            shutil.rmtree(where, ignore_errors=True)
            _git(root, "worktree", "prune")


class Asker:
    """One kept-alive connection to a server, timing each search request."""

    def __init__(self, port: int, secret: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}

    def search(self, text: str, vector: list[float], with_vector: bool) -> float:
        from .search import timed_search_request

        try:
            return timed_search_request(self.conn, self.headers, text, vector, with_vector)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # gunicorn closes a connection idle for 2 s (its keep-alive): asked again on a new one.
            self.conn.close()
            return timed_search_request(self.conn, self.headers, text, vector, with_vector)

    def close(self) -> None:
        self.conn.close()


def compare(
    askers: dict[str, Asker], queries: list[tuple[str, list[float]]]
) -> dict[str, dict[bool, list[float]]]:
    """Per server, its HTTP times with and without the caller's vector, each query asked of both in
    turn (this tree first for even queries, the other first for odd ones)."""
    names = list(askers)
    times: dict[str, dict[bool, list[float]]] = {name: {True: [], False: []} for name in names}
    for with_vector in (True, False):
        for i, (text, vector) in enumerate(queries):
            for name in names if i % 2 == 0 else names[::-1]:
                times[name][with_vector].append(askers[name].search(text, vector, with_vector))
    return times


def paired(this: list[float], other: list[float], seed: int = 7) -> tuple[float, float, float]:
    """The median of the per-query differences (this - other) and its bootstrap 95% interval, ms."""
    diff = np.asarray(this) - np.asarray(other)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(diff, size=(RESAMPLES, len(diff)), replace=True), axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return round(float(np.median(diff)), 2), round(float(low), 2), round(float(high), 2)


def rows(
    size: int,
    short: str,
    times: dict[str, dict[bool, list[float]]],
    percentiles: Callable[[list[float]], dict[str, float]],
) -> list[dict[str, Any]]:
    """Per path, a row for REV and one for this tree, with this tree's p95 over REV's and the
    paired median difference."""
    out = []
    for with_vector, path in ((True, "HTTP, caller vector"), (False, "HTTP, local embedding")):
        this, other = times["this"][with_vector], times["other"][with_vector]
        base, mine = percentiles(other), percentiles(this)
        median, low, high = paired(this, other)
        out.append({"episodes": size, "path": f"{path} [{short}]", "queries": len(other), **base})
        out.append(
            {
                "episodes": size,
                "path": f"{path} [this tree]",
                "queries": len(this),
                **mine,
                "p95_over_against": round(mine["p95"] / base["p95"], 2) if base["p95"] else None,
                "paired_median_diff_ms": median,
                "paired_diff_ci95_ms": [low, high],
            }
        )
    return out
