"""One error envelope for every failure: ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

import logging
from typing import Annotated, Any, TypedDict

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from typing_extensions import Doc

logger = logging.getLogger(__name__)


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "a dependency is unavailable"
    default_code = "service_unavailable"


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "conflict"
    default_code = "conflict"


class OverQuota(Conflict):
    """A write that would take the tenant past a cap of its policy; ``details`` names the cap, what
    the tenant holds and what the write would add."""

    default_detail = "over a cap of the tenant's policy"
    default_code = "over_quota"

    def __init__(self, detail: str, details: dict[str, Any]):
        super().__init__(detail)
        self.details = details


class Gone(exceptions.APIException):
    status_code = status.HTTP_410_GONE
    default_detail = "gone for good"
    default_code = "gone"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "request too large"
    default_code = "too_large"


class ErrorDetail(TypedDict):
    code: Annotated[str, Doc("invalid, unauthenticated, forbidden, not_found, ...")]
    message: str
    details: Annotated[Any, Doc("per field messages for `invalid`; otherwise empty")]


class Error(TypedDict):
    """Every failure's answer: what went wrong (``code``), in words, and per field when invalid."""

    error: ErrorDetail


def envelope(code: str, message: str, details: Any = None) -> Error:
    return {"error": {"code": code, "message": message, "details": details if details is not None else {}}}


def _code_for(exc: exceptions.APIException) -> str:
    if isinstance(exc, exceptions.ValidationError):
        return "invalid"
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        return "unauthenticated"
    if isinstance(exc, exceptions.PermissionDenied):
        return "forbidden"
    if isinstance(exc, exceptions.NotFound):
        return "not_found"
    return str(exc.default_code)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge("request body exceeds the size limit")
    response = drf_exception_handler(exc, context)
    if response is None:
        logger.exception("unhandled error", exc_info=exc)
        return Response(envelope("server_error", "internal server error"), status=500)
    assert isinstance(exc, exceptions.APIException)
    if isinstance(exc, exceptions.ValidationError):
        message = "request validation failed"
        details: Any = exc.detail
    else:
        message = str(exc.detail) if not isinstance(exc.detail, dict | list) else str(exc.default_detail)
        details = getattr(exc, "details", {})
    response.data = envelope(_code_for(exc), str(message), details)
    return response


# Django-level handlers, for errors raised outside DRF views (unknown URLs, crashes in middleware).
def handler404(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(envelope("not_found", f"no route for {request.path}"), status=404)


def handler500(request: HttpRequest) -> JsonResponse:
    return JsonResponse(envelope("server_error", "internal server error"), status=500)


def handler400(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(envelope("bad_request", "bad request"), status=400)


def handler403(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(envelope("forbidden", "forbidden"), status=403)
