"""Providers by alias or dotted path, each loaded once per process on first use; a tenant's
provider (``embedder_for``), which for ``openai`` is configured by the tenant."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from django.utils.module_loading import import_string

from .base import Embedder, EmbeddingError

if TYPE_CHECKING:
    from memory_platform.tenancy.models import Tenant

ALIASES = {
    "local": "memory_platform.embeddings.local.LocalEmbedder",
    "e5": "memory_platform.embeddings.e5.E5Embedder",
    "provided": "memory_platform.embeddings.provided.ProvidedEmbedder",
}
#: The provider configured per tenant (server, model, key, dimension): not a shared instance.
OPENAI = "openai"
#: The platform's English model, and the provider that takes its place for memory in a language
#: it reads poorly (docs/decisions/0043-multilingual-e5.md).
ENGLISH = "local"
MULTILINGUAL = "e5"

_instances: dict[object, Embedder] = {}
# Guards only the construction of a provider inside this process (a model load); it is not a
# stand-in for any shared-state lock.
_lock = threading.Lock()


def get_embedder(name: str) -> Embedder:
    if name == OPENAI:
        raise EmbeddingError("the openai embedder is configured per tenant: use embedder_for(tenant)")
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


def embedder_for_language(name: str, language: str) -> str:
    """The embedder for a tenant of ``name``'s whose memory is in ``language`` (a policy's): the
    multilingual one in place of the English model where that reads the language less than
    fully. Any other choice (openai, provided, a dotted path) was an operator's, and stays."""
    if name == ENGLISH and get_embedder(ENGLISH).reading(language) < 1:
        return MULTILINGUAL
    return name


def embedder_for(tenant: Tenant) -> Embedder:
    """The tenant's embedder: a shared provider by name, or its own ``openai`` client (one per
    configuration, so a changed key or URL takes effect at once)."""
    if tenant.embedder != OPENAI:
        return get_embedder(tenant.embedder)
    from .openai import OpenAIConfig, OpenAIEmbedder

    config = OpenAIConfig(
        base_url=tenant.embedder_url,
        model=tenant.embedder_model,
        api_key=tenant.embedder_key,
        dim=tenant.embedding_dim,
        send_dimensions=tenant.embedder_send_dimensions,
    )
    embedder = _instances.get(config)
    if embedder is None:
        with _lock:
            embedder = _instances.setdefault(config, OpenAIEmbedder(config))
    return embedder
