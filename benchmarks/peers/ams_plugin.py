"""Redis agent-memory-server (AMS) with all-MiniLM-L6-v2 in its own process, through the extension
point AMS documents for its store (``MEMORY_VECTOR_DB_FACTORY``): its own Redis store
(``RedisVLMemoryVectorDatabase``, RedisVL on RediSearch) with an embeddings object that runs the
platform's local weights through sentence-transformers instead of calling a provider through
LiteLLM (no provider is reachable here, and this is the same model the platform runs).

While the benchmark loads its synthetic memories, a memory's text is answered with the vector it
was given (``PEERS_GIVEN_VECTORS``: the corpus the platform and mem0 store too); anything else, every
query included, is embedded by the model.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import numpy as np


class LocalMiniLM:
    """The embeddings interface AMS's stores call (``embed_query``/``aembed_query``,
    ``embed_documents``/``aembed_documents``, ``dimensions``)."""

    def __init__(self) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(int(os.environ.get("PEERS_TORCH_THREADS", "1")))
        self.model = SentenceTransformer(os.environ["PEERS_MODEL_DIR"], device="cpu")
        self.model.encode(["warm-up"])
        self.model_name = "all-MiniLM-L6-v2"
        self._given: dict[str, np.ndarray] = {}
        given = os.environ.get("PEERS_GIVEN_VECTORS", "")
        for pair in filter(None, given.split(os.pathsep)):
            texts_path, vectors_path = pair.split("|")
            texts = [json.loads(line) for line in Path(texts_path).read_text().splitlines()]
            vectors = np.load(vectors_path)
            self._given.update(zip(texts, vectors, strict=True))

    @property
    def dimensions(self) -> int:
        return 384

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in texts if t not in self._given]
        made = (
            dict(zip(missing, self.model.encode(missing, normalize_embeddings=True), strict=True))
            if missing
            else {}
        )
        return [(self._given[t] if t in self._given else made[t]).tolist() for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.model.encode(text, normalize_embeddings=True).tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        # As a provider's client would, the event loop is not held while the model runs.
        return await asyncio.to_thread(self.embed_query, text)


def create_db(_embeddings: Any) -> Any:
    """AMS's own Redis store (as its default factory builds it), with the local model."""
    from agent_memory_server.config import settings
    from agent_memory_server.memory_vector_db import RedisVLMemoryVectorDatabase
    from agent_memory_server.memory_vector_db_factory import _build_redis_schema
    from agent_memory_server.utils.redis import redis_url_for_redisvl
    from redisvl.index import AsyncSearchIndex

    index = AsyncSearchIndex.from_dict(
        _build_redis_schema(), redis_url=redis_url_for_redisvl(settings.redis_url)
    )
    return RedisVLMemoryVectorDatabase(index, LocalMiniLM())
