"""The platform's side of the peers' benchmark. Runs in the project's own venv (``.venv/bin/python``,
Django set up), started by ``run.py`` as a subprocess; prints one JSON object on stdout, progress
on stderr. Nothing here is imported by the platform.

  search --sizes 10000 --seed 7 --queries 200   latency on the shared corpus (``common.make_corpus``)
  locomo PATH                                    `evaluate locomo`'s harness, all hot
  locomo-export PATH OUT                         LoCoMo as the harness reads it, for the peers
  redis-url                                      the embedded Redis the platform uses (for AMS)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
os.chdir(ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_platform.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] platform: {msg}", file=sys.stderr, flush=True)


def new_tenant(size: int):  # type: ignore[no-untyped-def]
    from memory_platform.tenancy.services import tenant_create

    return tenant_create(name=f"bench-peers-{size}-{uuid.uuid4().hex[:6]}", embedder="local")


def load_tenant(tenant, texts: list[str], vectors: np.ndarray) -> float:  # type: ignore[no-untyped-def]
    """A tenant of one-turn episodes holding ``texts`` with ``vectors``, laid out as `bench search`
    lays out its own (``retrieval.bench.search.load_tenant``): the newest ``hot_quota`` hot, the
    older ones packed, two warm for one cold, as the hot quota and the lifecycle leave them."""
    from episodes.stores.tables import EPISODES, TURNS
    from lifecycle.models import read_policy
    from retrieval.bench.search import planned_layers, write_batch

    size = len(texts)
    planned = planned_layers(size, int(read_policy(tenant).hot_quota))
    now = timezone.now()
    start = now - timedelta(days=200)
    batch = 2000
    started = time.perf_counter()
    for offset in range(0, size, batch):
        n = min(batch, size - offset)
        when = [start + timedelta(seconds=(200 * 86400 // size) * (offset + i)) for i in range(n)]
        layers = planned[offset : offset + n]
        write_batch(
            tenant, offset, texts[offset : offset + n], vectors[offset : offset + n], when, layers, now
        )
        done = offset + n
        if done % 10_000 == 0 or done == size:
            log(f"loaded {done}/{size} ({done / (time.perf_counter() - started):.0f} memories/s)")
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {EPISODES}, {TURNS}")
    return time.perf_counter() - started


def cmd_search(args: argparse.Namespace) -> dict:
    from common import make_corpus, make_queries, percentiles

    from memory_platform.embeddings import get_embedder
    from memory_platform.tenancy.services import api_key_create
    from retrieval.bench.search import measure_service
    from retrieval.bench.server import MAKE_RUN_WORKERS, Server, measure_http
    from rights.deletion import drop_tenant

    sizes = [int(s) for s in args.sizes.split(",")]
    texts_all, vectors_all = make_corpus(max(sizes), args.seed)
    query_texts = make_queries(args.queries + 20, args.seed)
    embedder = get_embedder("local")
    embedder.embed(["warm-up"])
    # The caller-vector paths get the vector the server would make of the same text.
    qvecs = embedder.embed(query_texts)
    queries = [(t, v.tolist()) for t, v in zip(query_texts, qvecs, strict=True)]
    warm, measured = queries[:20], queries[20:]
    # The query's embedding alone, as the server makes it (ONNX Runtime for one text, when it runs).
    embed_times = []
    for text, _ in measured:
        t0 = time.perf_counter()
        embedder.embed_one(text)
        embed_times.append((time.perf_counter() - t0) * 1000)
    rows = []
    loaded = []
    server = Server()
    try:
        for size in sizes:
            log(f"loading {size} memories")
            tenant = new_tenant(size)
            loaded.append(tenant)  # dropped in the end, however the run ends
            seconds = load_tenant(tenant, texts_all[:size], vectors_all[:size])
            _, secret = api_key_create(
                tenant=tenant, name="bench", scopes=["read"], actor="cli", now=timezone.now()
            )
            measure_service(tenant, warm, True)
            measure_service(tenant, warm, False)
            measure_http(server.port, secret, warm, True)
            measure_http(server.port, secret, warm, False)
            for label, over_http, with_vector in (
                ("service, query embedded", False, False),
                ("HTTP, query embedded", True, False),
                ("service, caller vector", False, True),
                ("HTTP, caller vector", True, True),
            ):
                log(f"{size}: measuring {label}")
                times = (
                    measure_http(server.port, secret, measured, with_vector)
                    if over_http
                    else measure_service(tenant, measured, with_vector)
                )
                rows.append(
                    {
                        "system": "platform",
                        "path": label,
                        "memories": size,
                        "load_s": round(seconds, 1),
                        **percentiles(times),
                    }
                )
            clients = [int(c) for c in args.clients.split(",") if c]
            if clients:
                rows += _loads(
                    size, secret, measured, clients, args.seconds, Server(workers=MAKE_RUN_WORKERS)
                )
    finally:
        server.stop()
        for tenant in loaded:
            drop_tenant(tenant, now=timezone.now(), log=lambda line: log(line))
    return {"rows": rows, "query_embedding": percentiles(embed_times)}


def _loads(size: int, secret: str, queries: list, clients: list[int], seconds: float, server) -> list[dict]:  # type: ignore[no-untyped-def]
    """Loads of ``clients`` concurrent clients over HTTP, the query embedded by the server, on a
    web server served as `make run` serves (its workers warmed up first, not counted)."""
    from common import load_measurer, load_row

    load = load_measurer()
    try:
        found = load.loads(
            f"http://127.0.0.1:{server.port}/api/v1/search",
            load.search_bodies(queries, with_vector=False),
            clients,
            seconds,
            headers={"Authorization": f"Bearer {secret}"},
            log=lambda line: log(f"{size}: {line}, query embedded"),
        )
    finally:
        server.stop()
    return [load_row("platform", "HTTP load, query embedded", size, row) for row in found]


def cmd_locomo(args: argparse.Namespace) -> dict:
    from retrieval.evaluation.locomo import run

    result = run(Path(args.path), log=log)
    return {
        "questions": result["questions"],
        "skipped": result["skipped_no_evidence"],
        "turns": result["turns"],
        "turn_recall10": result["overall"]["recall10"],
        "episode_recall10": result["episodes"]["overall"]["recall10"],
        "latency_ms": result["latency_ms"],
        "scheduled_ticks": result.get("scheduled_ticks"),
    }


def cmd_locomo_export(args: argparse.Namespace) -> dict:
    """The conversations and questions exactly as the platform's harness reads them (its own
    functions), so each peer stores the same turns and is asked the same questions."""
    from retrieval.evaluation.locomo import CATEGORIES, load, normalise_evidence, turn_text

    out = []
    for conv in load(Path(args.path)):
        turns = []
        for number, date, session_turns in conv.sessions:
            for i, turn in enumerate(session_turns):
                turns.append(
                    {
                        "dia_id": turn["dia_id"],
                        "text": turn_text(turn),
                        "speaker": turn["speaker"],
                        "session": number,
                        "occurred_at": (date + i * timedelta(seconds=30)).isoformat(),
                    }
                )
        dia_ids = {t["dia_id"] for t in turns}
        questions = []
        for q in conv.questions:
            evidence = [d for d in normalise_evidence(q.get("evidence", [])) if d in dia_ids]
            questions.append(
                {"question": q["question"], "category": CATEGORIES[q["category"]], "evidence": evidence}
            )
        out.append(
            {
                "sample_id": conv.sample_id,
                "speakers": list(conv.speakers),
                "turns": turns,
                "questions": questions,
            }
        )
    Path(args.out).write_text(json.dumps(out))
    return {"conversations": len(out), "turns": sum(len(c["turns"]) for c in out)}


def cmd_redis_url(args: argparse.Namespace) -> dict:
    from django.conf import settings

    return {"redis_url": settings.REDIS_URL}


def main() -> None:
    # A stopped run (SIGTERM) still drops the tenants it made (the ``finally`` of ``cmd_search``).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("search")
    s.add_argument("--sizes", default="10000")
    s.add_argument("--seed", type=int, default=7)
    s.add_argument("--queries", type=int, default=200)
    s.add_argument("--clients", default="", help="loads of this many concurrent clients over HTTP: 1,4,16")
    s.add_argument("--seconds", type=float, default=15.0)
    loc = sub.add_parser("locomo")
    loc.add_argument("path")
    exp = sub.add_parser("locomo-export")
    exp.add_argument("path")
    exp.add_argument("out")
    sub.add_parser("redis-url")
    args = parser.parse_args()
    from memory_platform.management.ready import require_migrated

    require_migrated()
    handler = {
        "search": cmd_search,
        "locomo": cmd_locomo,
        "locomo-export": cmd_locomo_export,
        "redis-url": cmd_redis_url,
    }[args.cmd]
    print(json.dumps(handler(args)), flush=True)


if __name__ == "__main__":
    main()
