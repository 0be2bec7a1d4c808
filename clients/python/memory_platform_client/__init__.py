"""A typed client for the memory platform's REST API: ``MemoryClient`` and ``AsyncMemoryClient``."""

from .client import AsyncMemoryClient, MemoryClient
from .errors import (
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    MemoryPlatformError,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    Unauthenticated,
    Unavailable,
)
from .types import Hit, Memory, Page, SearchResults, Turn, TurnsWritten

__all__ = [
    "AsyncMemoryClient",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Gone",
    "Hit",
    "Memory",
    "MemoryClient",
    "MemoryPlatformError",
    "NotFound",
    "Page",
    "PayloadTooLarge",
    "RateLimited",
    "SearchResults",
    "Turn",
    "TurnsWritten",
    "Unauthenticated",
    "Unavailable",
]
