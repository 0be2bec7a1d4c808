from .base import Embedder, EmbeddingError, to_storage, validate_vector
from .registry import embedder_for, embedder_for_language, get_embedder

__all__ = [
    "Embedder",
    "EmbeddingError",
    "embedder_for",
    "embedder_for_language",
    "get_embedder",
    "to_storage",
    "validate_vector",
]
