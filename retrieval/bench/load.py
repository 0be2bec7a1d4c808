"""`bench search --clients 1,4,16`: throughput under load. Each of N clients, a thread with its own
connection, sends ``POST /search`` one after the other for a fixed time, each its own turn through
the queries; what counts is searches per second over all of them and the latency each one saw.
Before the first load, as many clients as the largest one search for ``WARM_UP_SECONDS``, not
counted (every web worker loads its model on its first search).

Against a web server the run starts as `make run` serves (``server.MAKE_RUN_WORKERS`` workers of 4
threads) or, with ``--url``, against a running platform (`make run`, whose data the bench's tenant
shares; its rate limits then count).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import numpy as np

#: Query texts with their vectors, as `bench search` makes them.
Queries = list[tuple[str, list[float]]]

WARM_UP_SECONDS = 5.0


def measure_load(
    url: str, bodies: list[str], clients: int, seconds: float, *, headers: dict[str, str]
) -> dict[str, Any]:
    """``clients`` clients POSTing ``bodies`` (JSON, in turn) to ``url`` for ``seconds``: requests
    per second, their latency's percentiles (ms), and the answers that were not 200 (each one
    counted, none timed). Standard library and numpy only: the peers' benchmark loads its peers
    with it too (``benchmarks/peers``)."""
    place = urlsplit(url)
    host, port, path = place.hostname or "127.0.0.1", place.port or 80, place.path or "/"
    headers = {"Content-Type": "application/json", **headers}
    times: list[list[float]] = [[] for _ in range(clients)]
    failed = [0] * clients
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def client(n: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=120)
        i = n * len(bodies) // clients
        start.wait()
        while time.perf_counter() < deadline[0]:
            began = time.perf_counter()
            conn.request("POST", path, body=bodies[i % len(bodies)], headers=headers)
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                times[n].append((time.perf_counter() - began) * 1000)
            else:
                failed[n] += 1
            i += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline[0] = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    done = sum(len(each) for each in times)
    every = np.asarray([t for each in times for t in each] or [0.0])
    return {
        "clients": clients,
        "seconds": round(elapsed, 2),
        "searches": done,
        "searches_per_s": round(done / elapsed, 1),
        "p50": round(float(np.percentile(every, 50)), 2),
        "p95": round(float(np.percentile(every, 95)), 2),
        "failed": sum(failed),
    }


def loads(
    url: str,
    bodies: list[str],
    clients: Sequence[int],
    seconds: float,
    *,
    headers: dict[str, str],
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """``measure_load`` for each number of ``clients``, after a warm-up of the largest for
    ``WARM_UP_SECONDS`` that is not counted (every web worker loads its model on its first request)."""
    if not clients:
        return []
    measure_load(url, bodies, max(clients), WARM_UP_SECONDS, headers=headers)
    found = []
    for n in clients:
        log(f"{n} client(s) over HTTP for {seconds:g} s: {url}")
        found.append(measure_load(url, bodies, n, seconds, headers=headers))
    return found


def search_bodies(queries: Queries, *, with_vector: bool) -> list[str]:
    """``POST /search`` bodies of the queries, with their vectors or for the server to embed."""
    return [
        json.dumps({"query": text, "limit": 10, **({"vector": vector} if with_vector else {})})
        for text, vector in queries
    ]


def load_rows(
    size: int,
    url: str,
    secret: str,
    queries: Queries,
    clients: list[int],
    seconds: float,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """One row of `bench search`'s results for each number of clients."""
    found = loads(
        url.rstrip("/") + "/api/v1/search",
        search_bodies(queries, with_vector=True),
        clients,
        seconds,
        headers={"Authorization": f"Bearer {secret}"},
        log=lambda line: log(f"  {line}"),
    )
    return [
        {
            "episodes": size,
            "path": f"HTTP load, {row['clients']} client(s), caller vector",
            "queries": row["searches"],
            "p99": "",
            **row,
        }
        for row in found
    ]
