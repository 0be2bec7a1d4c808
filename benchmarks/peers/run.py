"""The platform, mem0 OSS and Redis agent-memory-server side by side: search latency on the same
memories and queries, and Recall@10 on the LoCoMo development half through each one's own API.
Run by ``run.sh`` in the peers' own venv; see README.md beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from common import (
    LOCOMO_DEV,
    PLATFORM_PY,
    ROOT,
    WORK,
    corpus_paths,
    log,
    make_corpus,
    make_queries,
    model_dir,
    offline_env,
    percentiles,
)

offline_env()


def _die_with_parent() -> None:
    """In the child: SIGTERM when this runner dies, so it drops its tenant and stops its server."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM
    except OSError:
        pass


def platform_side(*args: str) -> dict:
    """``platform_side.py`` in the project's venv; its progress goes to our stderr."""
    proc = subprocess.run(
        [str(PLATFORM_PY), str(Path(__file__).with_name("platform_side.py")), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_die_with_parent,
    )
    if proc.returncode:
        raise SystemExit(f"platform_side.py {args[0]} failed ({proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def torch_query_embedding(queries: list[str], threads: int) -> dict:
    """One query text at a time through sentence-transformers (torch), as both peers embed a query."""
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(str(model_dir()), device="cpu")
    for q in queries[:20]:
        model.encode(q, normalize_embeddings=True)
    times = []
    for q in queries[20:]:
        t0 = time.perf_counter()
        model.encode(q, normalize_embeddings=True)
        times.append((time.perf_counter() - t0) * 1000)
    return percentiles(times)


def machine() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        if dirty:
            commit += " with uncommitted changes in the work tree"
    except OSError:
        commit = "?"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}, {os.cpu_count()} cores, {platform.platform(terse=True)}, "
        f"Python {platform.python_version()}, project at {commit}, load average at start {load}"
    )


def versions() -> dict:
    from importlib.metadata import version

    out = {}
    for name in (
        "mem0ai",
        "agent-memory-server",
        "qdrant-client",
        "redisvl",
        "sentence-transformers",
        "torch",
    ):
        try:
            out[name] = version(name)
        except Exception:
            out[name] = "not installed"
    return out


def table(result: dict) -> str:
    lines = [f"Peers side by side — {result['machine']}", ""]
    lines.append(
        "Search latency, top 10, the same memories and query texts (each system embeds the query itself"
        " unless the path says caller vector):"
    )
    lines.append("")
    lines.append("| memories | system | path | p50 ms | p95 ms | queries | load (s) | searches/s |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in sorted(result["latency"], key=lambda r: (r["memories"], r["system"] != "platform", r["system"])):
        lines.append(
            f"| {r['memories']:,} | {r['system']} | {r['path']} | {r['p50']} | {r['p95']} | {r['n']} |"
            f" {r['load_s']} | {r.get('searches_per_s', '')} |"
        )
    emb = result.get("query_embedding", {})
    if emb:
        lines.append("")
        lines.append(
            "The query's embedding alone (all-MiniLM-L6-v2, one text), p50/p95 ms: "
            + "; ".join(f"{k} {v['p50']}/{v['p95']}" for k, v in emb.items())
        )
    ratios = []
    by = {(r["memories"], r["system"], r["path"]): r for r in result["latency"]}
    for size in sorted({r["memories"] for r in result["latency"]}):
        http = by.get((size, "platform", "HTTP, query embedded"))
        svc = by.get((size, "platform", "service, query embedded"))
        ams = by.get((size, "AMS", "HTTP, query embedded"))
        mem0 = by.get((size, "mem0", "in-process, query embedded"))
        if http and ams:
            ratios.append(f"{size:,}: AMS HTTP p95 / platform HTTP p95 = {ams['p95'] / http['p95']:.2f}")
        for n in sorted({r["clients"] for r in result["latency"] if "clients" in r}):
            ours = by.get((size, "platform", f"HTTP load, query embedded, {n} client(s)"))
            theirs = by.get((size, "AMS", f"HTTP load, query embedded, {n} client(s)"))
            if ours and theirs and theirs["searches_per_s"]:
                ratios.append(
                    f"{size:,}, {n} client(s): platform / AMS searches per second = "
                    f"{ours['searches_per_s'] / theirs['searches_per_s']:.2f}"
                )
        if svc and mem0:
            ratios.append(f"{size:,}: mem0 p95 / platform service p95 = {mem0['p95'] / svc['p95']:.2f}")
    if ratios:
        lines.append("")
        lines.append("Ratios (same run): " + "; ".join(ratios))
    if result.get("recall"):
        lines.append("")
        lines.append("Recall@10 on LoCoMo's development half (an evidence turn among the first 10 results):")
        lines.append("")
        lines.append("| system | questions | turn R@10 | episode R@10 | search p50 / p95 ms |")
        lines.append("| --- | --- | --- | --- | --- |")
        for r in result["recall"]:
            episode = f"{r['episode_recall10']:.3f}" if "episode_recall10" in r else "—"
            lines.append(
                f"| {r['system']} | {r['questions']} | {r['turn_recall10']:.3f} | {episode} | "
                f"{r['latency_ms']['p50']} / {r['latency_ms']['p95']} |"
            )
    if result.get("skipped"):
        lines.append("")
        lines.extend(f"Not measured: {s}" for s in result["skipped"])
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--sizes", default="10000", help="memories per latency measurement, e.g. 10000,100000"
    )
    parser.add_argument("--queries", type=int, default=200, help="measured queries per system and size")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--systems", default="platform,mem0,ams")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--no-recall", action="store_true")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch threads of the peers' embedder (1: on two shared cores, 2 threads "
        "spin against other work and a query's embedding takes 10x longer)",
    )
    parser.add_argument(
        "--clients",
        default="1,4,16",
        help="loads of this many concurrent clients over HTTP after the latency (empty: none)",
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="how long each load runs")
    parser.add_argument("--locomo", default=str(LOCOMO_DEV))
    args = parser.parse_args()
    systems = set(args.systems.split(","))
    sizes = [int(s) for s in args.sizes.split(",")]
    WORK.mkdir(exist_ok=True)
    result: dict = {
        "machine": machine(),
        "versions": versions(),
        "args": vars(args),
        "latency": [],
        "recall": [],
        "skipped": [],
        "query_embedding": {},
    }
    log(result["machine"])
    log(f"versions: {result['versions']}")
    import torch

    torch.set_num_threads(args.torch_threads)
    redis_url = platform_side("redis-url")["redis_url"] if "ams" in systems else ""

    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_path = WORK / f"results-{stamp}.json"

    def save() -> None:  # after every step: a later failure keeps what was measured
        out_path.write_text(json.dumps(result, indent=2))

    if not args.no_latency:
        texts, vectors = make_corpus(max(sizes), args.seed)
        queries = make_queries(args.queries + 20, args.seed)
        log(f"corpus: {len(texts)} memories, {len(queries) - 20} queries (+20 warm-ups)")
        result["query_embedding"][f"sentence-transformers/torch, {args.torch_threads} thread(s)"] = (
            torch_query_embedding(queries, args.torch_threads)
        )
        if "platform" in systems:
            out = platform_side(
                "search",
                "--sizes",
                args.sizes,
                "--seed",
                str(args.seed),
                "--queries",
                str(args.queries),
                "--clients",
                args.clients,
                "--seconds",
                str(args.seconds),
            )
            result["latency"] += out["rows"]
            result["query_embedding"]["platform's embed_one"] = out["query_embedding"]
            save()
        if "mem0" in systems:
            import mem0_side

            result["latency"] += mem0_side.run_search(sizes, texts, vectors, queries)
            save()
        if "ams" in systems:
            import ams_side

            t, v = corpus_paths(max(sizes), args.seed)
            rows = ams_side.run_search(
                redis_url,
                sizes,
                (str(t), str(v)),
                texts,
                queries,
                args.torch_threads,
                clients=[int(c) for c in args.clients.split(",") if c],
                seconds=args.seconds,
            )
            result["latency"] += rows
            measured = {r["memories"] for r in rows}
            result["skipped"] += [
                f"AMS at {s:,}: no room in the embedded Redis's maxmemory" for s in sizes if s not in measured
            ]
            save()

    if not args.no_recall:
        export = WORK / "locomo-export.json"
        platform_side("locomo-export", args.locomo, str(export))
        conversations = json.loads(export.read_text())
        if "platform" in systems:
            log("platform: LoCoMo through `evaluate locomo`'s harness (all hot)")
            out = platform_side("locomo", args.locomo)
            result["recall"].append({"system": "platform", **out})
            save()
        if "mem0" in systems:
            import mem0_side

            result["recall"].append(mem0_side.run_locomo(conversations))
            save()
        if "ams" in systems:
            import ams_side

            result["recall"].append(ams_side.run_locomo(redis_url, conversations, args.torch_threads))

    save()
    print()
    print(table(result))
    print()
    print(f"(all figures: {out_path})")


if __name__ == "__main__":
    sys.exit(main())
