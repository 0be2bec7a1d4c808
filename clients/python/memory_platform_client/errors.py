"""The API's error envelope (``{"error": {"code", "message", "details"}}``) as exceptions."""

from __future__ import annotations

from typing import Any


class MemoryPlatformError(Exception):
    """An answer the platform gave with an error status (or no answer: ``Unavailable``)."""

    status: int = 0

    def __init__(self, message: str, *, status: int | None = None, code: str = "", details: Any = None):
        super().__init__(message)
        self.status = type(self).status if status is None else status
        self.code = code
        self.details = details if details is not None else {}


class BadRequest(MemoryPlatformError):
    status = 400


class Unauthenticated(MemoryPlatformError):
    status = 401


class Forbidden(MemoryPlatformError):
    status = 403


class NotFound(MemoryPlatformError):
    status = 404


class Conflict(MemoryPlatformError):
    status = 409


class Gone(MemoryPlatformError):
    """The user_id was erased from the tenant for good: its writes are refused."""

    status = 410


class PayloadTooLarge(MemoryPlatformError):
    status = 413


class RateLimited(MemoryPlatformError):
    """Too many requests; ``retry_after`` is the seconds the platform asked to wait."""

    status = 429

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class Unavailable(MemoryPlatformError):
    """A 503, or the platform could not be reached (``status`` 0)."""

    status = 503


BY_STATUS: dict[int, type[MemoryPlatformError]] = {
    cls.status: cls
    for cls in (
        BadRequest,
        Unauthenticated,
        Forbidden,
        NotFound,
        Conflict,
        Gone,
        PayloadTooLarge,
        RateLimited,
    )
}


def error_for(status: int, body: Any, headers: Any) -> MemoryPlatformError:
    """The exception for an error answer: its class by status, its message and details from the envelope."""
    error = body.get("error", {}) if isinstance(body, dict) else {}
    message = str(error.get("message") or f"HTTP {status}")
    code, details = str(error.get("code", "")), error.get("details")
    if status == 429:
        after = headers.get("Retry-After") if headers is not None else None
        return RateLimited(
            message, retry_after=float(after) if after else None, status=status, code=code, details=details
        )
    cls = Unavailable if status >= 500 else BY_STATUS.get(status, MemoryPlatformError)
    return cls(message, status=status, code=code, details=details)
