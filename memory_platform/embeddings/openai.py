"""Embeddings from any OpenAI-compatible ``/embeddings`` server (docs/decisions/0025): OpenAI itself,
text-embeddings-inference, vLLM, Ollama, LiteLLM... The server, model, key and dimension are the
tenant's (``Tenant.embedder_url`` and the fields beside it).

Vectors are stored in the platform's width (``MEMORY["EMBEDDING_DIM"]``): a model of fewer
dimensions is padded with zeros, which changes no cosine; a wider model must shorten its vectors
on request (OpenAI's ``dimensions`` parameter; ``Tenant.embedder_send_dimensions``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memory_platform.conf import memory_settings
from memory_platform.openai_compat import RemoteError, post_json

from .base import Embedder, EmbeddingError, to_storage

MAX_RESPONSE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class OpenAIConfig:
    base_url: str
    model: str
    api_key: str
    #: What the model answers (at most the platform's width).
    dim: int
    #: Send ``dimensions`` with each request (models that shorten their vectors on request).
    send_dimensions: bool = False


class OpenAIEmbedder(Embedder):
    name = "openai"

    def __init__(self, config: OpenAIConfig, *, timeout: float | None = None, retries: int | None = None):
        self.config = config
        self.model_dim = config.dim
        self.timeout = float(memory_settings.OPENAI_EMBED_TIMEOUT if timeout is None else timeout)
        self.retries = int(memory_settings.OPENAI_EMBED_RETRIES if retries is None else retries)
        self.batch = max(1, int(memory_settings.EMBED_BATCH_SIZE))

    @property
    def model_id(self) -> str:
        return f"openai:{self.config.model}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch):
            chunk = list(texts[start : start + self.batch])
            out[start : start + len(chunk)] = self._embed_batch(chunk)
        return out

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        body: dict[str, object] = {"model": self.config.model, "input": texts, "encoding_format": "float"}
        if self.config.send_dimensions:
            body["dimensions"] = self.model_dim
        for attempt in range(self.retries + 1):
            try:
                payload = post_json(
                    self.config.base_url,
                    "embeddings",
                    body,
                    api_key=self.config.api_key,
                    timeout=self.timeout,
                    max_bytes=MAX_RESPONSE_BYTES,
                )
                break
            except RemoteError as exc:
                if not exc.retryable:
                    raise EmbeddingError(f"the embedding server refused the request: {exc}") from None
                if attempt == self.retries:
                    raise EmbeddingError(
                        f"the embedding server is unavailable ({exc}; tried {attempt + 1} times)",
                        retryable=True,
                    ) from None
                time.sleep(0.5 * 2**attempt)
        return np.stack([to_storage(v) for v in self._vectors(payload, len(texts))])

    def _vectors(self, payload: object, count: int) -> list[np.ndarray]:
        """The answer's vectors in input order, checked: one per text, the declared dimension,
        finite numbers, not all zeros; normalised."""
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list) or len(data) != count:
            raise EmbeddingError(f"the embedding server answered no list of {count} embeddings")
        ordered: list[object] = [None] * count
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < count or ordered[index] is not None:
                raise EmbeddingError("the embedding server answered embeddings out of order")
            ordered[index] = item.get("embedding") if isinstance(item, dict) else None
        vectors = []
        for vector in ordered:
            if not isinstance(vector, list) or not all(isinstance(x, int | float) for x in vector):
                raise EmbeddingError(
                    "the embedding server answered an embedding that is not a list of numbers"
                )
            if len(vector) != self.model_dim:
                hint = (
                    f"; this platform stores at most {self.dim}: choose a model of at most {self.dim} "
                    "dimensions or one that shortens its vectors on request (send dimensions)"
                    if len(vector) > self.dim
                    else ""
                )
                raise EmbeddingError(
                    f"the embedding server answered {len(vector)}-dimensional vectors; the tenant "
                    f"declares {self.model_dim}{hint}"
                )
            array = np.asarray(vector, dtype=np.float64)
            norm = math.sqrt(float(np.dot(array, array))) if np.isfinite(array).all() else 0.0
            if not norm:
                raise EmbeddingError("the embedding server answered a zero or non-finite embedding")
            vectors.append((array / norm).astype(np.float32))
        return vectors
