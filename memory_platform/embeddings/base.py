"""The embedding provider interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from memory_platform.conf import DEFAULTS


class EmbeddingError(Exception):
    """An embedding could not be made. ``retryable`` says whether trying again can help."""

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


class Embedder(ABC):
    name: str = "base"
    dim: int = int(DEFAULTS["EMBEDDING_DIM"])
    #: False when the caller must send vectors (the ``provided`` embedder).
    computes: bool = True
    #: How well it reads a query in each language (``episodes.language`` codes), as a factor on
    #: its vector list's weight in search's fusion; 1 for a language not named. At 0 the query is
    #: not embedded (its vectors would only add noise) and full text alone ranks it.
    reads: Mapping[str, float] = MappingProxyType({})

    def reading(self, language: str) -> float:
        return self.reads.get(language, 1.0)

    @property
    def model_id(self) -> str:
        """What made the vectors: an export names it, and an import re-embeds when it differs."""
        return self.name

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts to store (turns, memories, their windows): a float32 array of shape
        (len(texts), dim), rows L2-normalised."""

    def embed_one(self, text: str) -> np.ndarray:
        """A search query; a model that embeds queries unlike stored texts (e5) overrides it."""
        return self.embed([text])[0]


# Exactly int or float: a bool is an int to isinstance, and is not a coordinate. (The types of a
# JSON vector's numbers are looked at all at once first; numpy's numbers only one by one.)
_NUMBER_TYPES = frozenset({int, float})


def validate_vector(vector: Sequence[float], dim: int) -> np.ndarray:
    """Check a caller-supplied vector: right size, numbers only (not booleans), finite, not all
    zeros; return it normalised."""
    if not isinstance(vector, list | tuple | np.ndarray):
        raise EmbeddingError("vector must be a list of numbers")
    if len(vector) != dim:
        raise EmbeddingError(f"vector has {len(vector)} dimensions; this tenant uses {dim}")
    if isinstance(vector, np.ndarray):
        if vector.ndim != 1 or vector.dtype.kind not in "iuf":
            raise EmbeddingError("vector must contain only numbers")
    elif not set(map(type, vector)) <= _NUMBER_TYPES and not all(
        v.__class__ in _NUMBER_TYPES or isinstance(v, np.integer | np.floating) for v in vector
    ):
        raise EmbeddingError("vector must contain only numbers")
    array = np.asarray(vector, dtype=np.float64)
    if not np.isfinite(array).all():
        raise EmbeddingError("vector contains NaN or infinite values")
    # Scaled first: the squares of values near the largest double would overflow the norm.
    scale = float(np.max(np.abs(array)))
    if scale == 0.0:
        raise EmbeddingError("vector is all zeros")
    array = array / scale
    return (array / np.linalg.norm(array)).astype(np.float32)


def to_storage(vector: np.ndarray) -> np.ndarray:
    """A unit vector in the platform's stored width (``MEMORY["EMBEDDING_DIM"]``): a narrower
    model's vector is padded with zeros, which leaves its norm and every cosine unchanged."""
    width = int(DEFAULTS["EMBEDDING_DIM"])
    if len(vector) > width:
        raise EmbeddingError(f"vector has {len(vector)} dimensions; the platform stores at most {width}")
    if len(vector) == width:
        return np.asarray(vector, dtype=np.float32)
    return np.concatenate(
        [np.asarray(vector, dtype=np.float32), np.zeros(width - len(vector), dtype=np.float32)]
    )
