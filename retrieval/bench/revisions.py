"""`bench search --against REV`: this tree's search and another revision's, query by query: the
service in a process of each, and over HTTP through a web server of each.

Whether a change made search slower cannot be told from two runs of `bench search`: on these shared
machines the same path's p95 moves by more between two runs a quarter of an hour apart than most
changes move it. Here two processes search at once on the same tenant, one running this tree's
code and one running REV's (checked out into a temporary worktree), and each query is asked of
both in turn, in alternating order, so both sets of timings share every moment's load: two
searchers timing the service's ``search`` inside themselves, then two web servers timed from here. Besides
each one's percentiles, the paired difference: the median of (this tree - REV) over the queries,
with a bootstrap 95% interval; an interval that holds 0 says the two cannot be told apart.

Both servers use this process's database and Redis, so REV must have the same migrations as this
tree (it is refused otherwise).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from django.conf import settings

from memory_platform.tenancy.models import Tenant

from .server import child_env, timed_search_request, wait_or_kill

#: Query texts with their vectors, as `bench search` makes them.
Queries = list[tuple[str, list[float]]]

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
        try:
            return timed_search_request(self.conn, self.headers, text, vector, with_vector)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # gunicorn closes a connection idle for 2 s (its keep-alive): asked again on a new one.
            self.conn.close()
            return timed_search_request(self.conn, self.headers, text, vector, with_vector)

    def close(self) -> None:
        self.conn.close()


#: What a ``Searcher`` runs, in REV's checkout (its working directory, first on its path): only
#: what every revision since the service took ``SearchQuery`` has, so that older ones run it too.
#: One query a line in, its time and its hits a line out; accesses are not recorded, so both
#: revisions search the same state and their answers can be compared.
_SEARCHER = """
import json, sys, time
import django
django.setup()
import numpy as np
from django.utils import timezone
from memory_platform.tenancy.models import Tenant
from retrieval.query import SearchQuery
from retrieval.services import search
tenant = Tenant.objects.get(pk=sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    asked = json.loads(line)
    vector = None if asked["vector"] is None else np.asarray(asked["vector"], dtype=np.float32)
    query = SearchQuery(text=asked["text"], vector=vector, limit=10, record_access=False)
    now = timezone.now()
    started = time.perf_counter()
    result = search(tenant=tenant, query=query, now=now)
    took = (time.perf_counter() - started) * 1000
    print(json.dumps({"ms": took, "hits": [h.episode.pk for h in result.hits]}), flush=True)
"""


class Searcher:
    """A process running the service's ``search`` on the code under ``root``, timed inside it, one
    query at a time (``_SEARCHER``)."""

    def __init__(self, root: Path, tenant: Tenant, env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SEARCHER, str(tenant.pk)],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        if self.stdout.readline().strip() != "ready":
            self.close()
            raise RuntimeError(f"the searcher on {root} did not start")
        self.hits: list[list[int]] = []

    def search(self, text: str, vector: list[float], with_vector: bool) -> float:
        self.stdin.write(json.dumps({"text": text, "vector": vector if with_vector else None}) + "\n")
        self.stdin.flush()
        line = self.stdout.readline()
        if not line:
            raise RuntimeError("the searcher stopped")
        answer = json.loads(line)
        self.hits.append(answer["hits"])
        return float(answer["ms"])

    def close(self) -> None:
        self.stdin.close()  # its loop ends
        wait_or_kill(self.proc)


class _Asks(Protocol):
    def search(self, text: str, vector: list[float], with_vector: bool) -> float: ...


def compare(askers: Mapping[str, _Asks], queries: Queries) -> dict[str, dict[bool, list[float]]]:
    """Per server or searcher, its times with and without the caller's vector, each query asked of
    both in turn (this tree first for even queries, the other first for odd ones)."""
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
    kind: str,
    same: tuple[int, int] | None = None,
) -> list[dict[str, Any]]:
    """Per path (``kind``: "service" or "HTTP"), a row for REV and one for this tree, with this
    tree's p95 over REV's, the paired median difference and, for the searchers, how many queries
    both answered alike (``same``: of how many)."""
    out = []
    for with_vector, path in ((True, f"{kind}, caller vector"), (False, f"{kind}, local embedding")):
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
                **({"same_answers": list(same)} if same is not None else {}),
            }
        )
    return out


def same_answers(this: Searcher, other: Searcher) -> tuple[int, int]:
    """Of the queries both searchers answered, how many got the same episodes in the same order."""
    return sum(a == b for a, b in zip(this.hits, other.hits, strict=True)), len(this.hits)


def measure(
    size: int,
    tenant: Tenant,
    secret: str,
    warm: Queries,
    queries: Queries,
    against: tuple[Path, str],
    ports: tuple[int, int],
    percentiles: Callable[[list[float]], dict[str, float]],
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """The rows of ``--against`` for one tenant: the service, a searcher on each code, then HTTP,
    this tree's server and REV's (``ports``: this tree's first), each warmed up on ``warm`` first
    (the model loaded, the connections made) and timed on ``queries``."""
    where, short = against
    log(f"  measuring the service on this tree and on {short}, query by query")
    searchers = {
        "this": Searcher(Path(settings.BASE_DIR), tenant, child_env()),
        "other": Searcher(where, tenant, child_env()),
    }
    try:
        compare(searchers, warm)
        service = compare(searchers, queries)
        same = same_answers(searchers["this"], searchers["other"])
    finally:
        for searcher in searchers.values():
            searcher.close()
    log(f"  measuring HTTP on this tree and on {short}, query by query")
    askers = {"this": Asker(ports[0], secret), "other": Asker(ports[1], secret)}
    try:
        compare(askers, warm)
        over_http = compare(askers, queries)
    finally:
        for asker in askers.values():
            asker.close()
    return [
        *rows(size, short, service, percentiles, "service", same),
        *rows(size, short, over_http, percentiles, "HTTP"),
    ]
