"""`bench ingest`: turns per second through the ingest service, three ways."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
from django.utils import timezone

from episodes.models import EMBEDDING_DIM
from episodes.scope import Scope
from episodes.services import TurnInput
from lifecycle.services import turns_ingest
from memory_platform.tenancy.services import tenant_create
from rights.deletion import drop_tenant

WORDS = [
    "deploy",
    "budget",
    "meeting",
    "travel",
    "recipe",
    "garden",
    "python",
    "invoice",
    "hiking",
    "concert",
    "guitar",
    "painting",
    "dentist",
    "vacation",
    "marathon",
    "project",
    "deadline",
    "review",
    "family",
    "birthday",
    "museum",
    "coffee",
    "weather",
    "football",
    "novel",
]


def synthetic_turns(count: int, rng: np.random.Generator, with_vectors: bool) -> list[TurnInput]:
    start = timezone.now() - timedelta(days=30)
    turns = []
    vectors = None
    if with_vectors:
        # A conversation stays on a topic for a while: vectors near a topic centre, a new centre
        # every 12 turns, so segmentation sees what it would see on real text.
        centres = rng.normal(size=(count // 12 + 1, EMBEDDING_DIM)).astype(np.float32)
        vectors = centres[np.arange(count) // 12] + 0.3 * rng.normal(size=(count, EMBEDDING_DIM)).astype(
            np.float32
        )
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for i in range(count):
        words = " ".join(rng.choice(WORDS, size=12))
        turns.append(
            TurnInput(
                role="user" if i % 2 == 0 else "assistant",
                text=f"Turn {i}: we talked about {words}.",
                scope=Scope.owner(user_id="bench", session_id=f"session-{i // 200}"),
                occurred_at=start + timedelta(seconds=30 * i),
                vector=vectors[i] if vectors is not None else None,
            )
        )
    return turns


def run_mode(mode: str, turns: int, batch: int, seed: int, log: Callable[[str], None]) -> dict[str, Any]:
    embedder = {"durable": "local", "provided": "provided", "local": "local"}[mode]
    tenant = tenant_create(name=f"bench-ingest-{mode}-{uuid.uuid4().hex[:8]}", embedder=embedder)
    rng = np.random.default_rng(seed)
    data = synthetic_turns(turns, rng, with_vectors=mode == "provided")
    texts = [t.text for t in data]
    alone: list[float] = []
    if mode == "local":
        # The model loaded outside the timing, as a running server has it loaded; and what the
        # platform can at best reach, measured before and after it on this machine's load: the
        # model alone, embedding the same texts in the same batches once each.
        log("  local: the embedder alone on the same texts")
        alone.append(embedder_texts_per_s(texts, batch))
    try:
        started = time.perf_counter()
        for offset in range(0, turns, batch):
            turns_ingest(
                tenant=tenant,
                turns=data[offset : offset + batch],
                now=timezone.now(),
                asynchronous=mode == "durable",
            )
            done = min(offset + batch, turns)
            if done % (batch * 10) == 0 or done == turns:
                log(f"  {mode}: {done}/{turns} turns")
        elapsed = time.perf_counter() - started
    finally:
        drop_tenant(tenant, now=timezone.now(), log=lambda line: log(f"  {line}"))
    result: dict[str, Any] = {
        "mode": mode,
        "turns": turns,
        "batch": batch,
        "seconds": round(elapsed, 3),
        "turns_per_s": round(turns / elapsed, 1),
    }
    if mode == "local":
        log("  local: the embedder alone on the same texts, again")
        alone.append(embedder_texts_per_s(texts, batch))
        own = sum(alone) / len(alone)
        result.update(
            embedder_texts_per_s=round(own, 1),
            embedder_texts_per_s_before_after=[round(a, 1) for a in alone],
            embedder_share=round(turns / elapsed / own, 3),
        )
    return result


def embedder_texts_per_s(texts: list[str], batch: int) -> float:
    """The local model's own throughput on ``texts``, embedded once each in batches of ``batch``."""
    from memory_platform.embeddings import get_embedder

    embedder = get_embedder("local")
    embedder.embed(["warm-up"])
    started = time.perf_counter()
    for offset in range(0, len(texts), batch):
        embedder.embed(texts[offset : offset + batch])
    return len(texts) / (time.perf_counter() - started)
