from .base import Embedder, EmbeddingError, validate_vector
from .registry import get_embedder

__all__ = ["Embedder", "EmbeddingError", "get_embedder", "validate_vector"]
