"""mem0 OSS in-process: its default local store (Qdrant's embedded local mode, in a directory under
``.work/``), all-MiniLM-L6-v2 from the platform's local weights through its ``huggingface``
embedder (sentence-transformers), no LLM: every memory is added with ``infer=False``."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from common import DIM, WORK, log, model_dir, offline_env, percentiles, recall_at_10

offline_env()
# mem0 builds its default LLM client (OpenAI) when a Memory is made, even though `infer=False` never
# calls it; a placeholder key lets it be built. Nothing is sent anywhere.
os.environ.setdefault("OPENAI_API_KEY", "unused-no-llm-is-called")


def make_memory(name: str) -> Any:
    from mem0 import Memory

    store = WORK / "mem0" / name
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir(parents=True)
    config = {
        "vector_store": {
            "provider": "qdrant",
            "config": {"collection_name": "mem0", "embedding_model_dims": DIM, "path": str(store / "qdrant")},
        },
        "embedder": {
            "provider": "huggingface",
            "config": {"model": str(model_dir()), "embedding_dims": DIM, "model_kwargs": {"device": "cpu"}},
        },
        "history_db_path": str(store / "history.db"),
    }
    return Memory.from_config(config)


def drop(name: str) -> None:
    shutil.rmtree(WORK / "mem0" / name, ignore_errors=True)


def given_vectors(memory: Any, vectors: dict[str, np.ndarray]) -> Callable[[], None]:
    """While loading: the embedder answers a memory's text with the vector it was given (the same
    vector the platform and AMS store), so loading does not wait on the model; a search's query is
    embedded by mem0's own embedder, as always. Returns the function that puts it back."""
    model = memory.embedding_model
    original = model.embed

    def embed(text: str, memory_action: str | None = None) -> list[float]:
        if memory_action == "add" and text in vectors:
            return vectors[text].tolist()
        return original(text, memory_action)

    model.embed = embed

    def restore() -> None:
        model.embed = original

    return restore


def measure_search(memory: Any, queries: list[str], user_id: str) -> list[float]:
    times = []
    for q in queries:
        t0 = time.perf_counter()
        memory.search(q, filters={"user_id": user_id}, top_k=10, threshold=0.0)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def run_search(sizes: list[int], texts: list[str], vectors: np.ndarray, queries: list[str]) -> list[dict]:
    rows = []
    for size in sizes:
        name = f"search-{size}"
        memory = make_memory(name)
        try:
            restore = given_vectors(memory, dict(zip(texts[:size], vectors[:size], strict=True)))
            log(f"mem0: loading {size} memories (add(..., infer=False), 100 messages a call)")
            t0 = time.perf_counter()
            for offset in range(0, size, 100):
                batch = texts[offset : min(size, offset + 100)]
                memory.add([{"role": "user", "content": t} for t in batch], user_id="bench", infer=False)
                done = offset + len(batch)
                if done % 5000 == 0 or done == size:
                    rate = done / (time.perf_counter() - t0)
                    log(
                        f"mem0: loaded {done}/{size} ({rate:.0f} memories/s, {(size - done) / rate:.0f} s to go)"
                    )
            load_s = time.perf_counter() - t0
            restore()
            measure_search(memory, queries[:20], "bench")
            log(f"mem0: {size}: measuring search")
            times = measure_search(memory, queries[20:], "bench")
            rows.append(
                {
                    "system": "mem0",
                    "path": "in-process, query embedded",
                    "memories": size,
                    "load_s": round(load_s, 1),
                    **percentiles(times),
                }
            )
        finally:
            del memory
            drop(name)
    return rows


def run_locomo(conversations: list[dict]) -> dict:
    """Each conversation under a user of its own; one memory per turn (its text as the platform
    stores it, its dia_id in metadata); each question searched within its conversation's user."""
    memory = make_memory("locomo")
    found: list[list[list[str]]] = []
    evidence: list[set[str]] = []
    times: list[float] = []
    try:
        for conv in conversations:
            user = f"locomo-{conv['sample_id']}"
            log(f"mem0: {conv['sample_id']}: adding {len(conv['turns'])} turns")
            for offset in range(0, len(conv["turns"]), 50):
                for t in conv["turns"][offset : offset + 50]:
                    memory.add(
                        [{"role": "user", "content": t["text"]}],
                        user_id=user,
                        metadata={
                            "dia_id": t["dia_id"],
                            "session": t["session"],
                            "occurred_at": t["occurred_at"],
                        },
                        infer=False,
                    )
            for q in conv["questions"]:
                if not q["evidence"]:
                    continue
                t0 = time.perf_counter()
                result = memory.search(q["question"], filters={"user_id": user}, top_k=10, threshold=0.0)
                times.append((time.perf_counter() - t0) * 1000)
                found.append([[(r.get("metadata") or {}).get("dia_id", "")] for r in result["results"]])
                evidence.append(set(q["evidence"]))
    finally:
        del memory
        drop("locomo")
    return {
        "system": "mem0",
        "questions": len(evidence),
        "turn_recall10": recall_at_10(found, evidence),
        "latency_ms": percentiles(times),
    }
