"""The embedding provider interface."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np


class EmbeddingError(Exception):
    """An embedding could not be made. ``retryable`` says whether trying again can help."""

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


class Embedder(ABC):
    name: str = "base"
    dim: int = 384
    #: False when the caller must send vectors (the ``provided`` embedder).
    computes: bool = True

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return a float32 array of shape (len(texts), dim), rows L2-normalised."""

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


def validate_vector(vector: Sequence[float], dim: int) -> np.ndarray:
    """Check a caller-supplied vector: right size, finite, not all zeros; return it normalised."""
    if not isinstance(vector, list | tuple | np.ndarray):
        raise EmbeddingError("vector must be a list of numbers")
    if len(vector) != dim:
        raise EmbeddingError(f"vector has {len(vector)} dimensions; this tenant uses {dim}")
    try:
        values = [float(v) for v in vector]
    except (TypeError, ValueError):
        raise EmbeddingError("vector must contain only numbers") from None
    if any(isinstance(v, bool) for v in vector):
        raise EmbeddingError("vector must contain only numbers")
    if not all(math.isfinite(v) for v in values):
        raise EmbeddingError("vector contains NaN or infinite values")
    array = np.asarray(values, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    if norm == 0.0:
        raise EmbeddingError("vector is all zeros")
    return array / norm
