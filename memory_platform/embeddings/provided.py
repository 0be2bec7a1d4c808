"""The caller sends the vectors (precomputed vectors); nothing is computed here."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import Embedder, EmbeddingError


class ProvidedEmbedder(Embedder):
    name = "provided"
    computes = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise EmbeddingError("this tenant uses caller-provided vectors: send 'vector' with the request")
