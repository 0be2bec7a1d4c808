"""Providers by alias or dotted path, each loaded once per process on first use."""

from __future__ import annotations

import threading

from django.utils.module_loading import import_string

from .base import Embedder, EmbeddingError

ALIASES = {
    "local": "memory_platform.embeddings.local.LocalEmbedder",
    "provided": "memory_platform.embeddings.provided.ProvidedEmbedder",
}

_instances: dict[str, Embedder] = {}
# Guards only the construction of a provider inside this process (a model load); it is not a
# stand-in for any shared-state lock.
_lock = threading.Lock()


def get_embedder(name: str) -> Embedder:
    path = ALIASES.get(name, name)
    embedder = _instances.get(path)
    if embedder is not None:
        return embedder
    with _lock:
        if path not in _instances:
            try:
                cls = import_string(path)
            except ImportError as exc:
                raise EmbeddingError(f"unknown embedder {name!r}: {exc}") from exc
            if not (isinstance(cls, type) and issubclass(cls, Embedder)):
                raise EmbeddingError(f"{path} is not an Embedder")
            _instances[path] = cls()
        return _instances[path]
