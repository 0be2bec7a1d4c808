"""Scope checks. A view names the scope it needs; by default reads need `read`, writes `write`."""

from __future__ import annotations

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request

from .models import ApiKey


class KeyHasScope(permissions.BasePermission):
    """The request came with an API key (which names its tenant) holding the scope the view needs:
    ``required_scope``, else read for safe methods and write for the others."""

    message = "this API key lacks the scope this call needs"

    def has_permission(self, request: Request, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey):
            return False
        scope = getattr(view, "required_scope", None)
        if scope is None:
            scope = "read" if request.method in permissions.SAFE_METHODS else "write"
        if not key.has_scope(scope):
            self.message = f"this API key lacks the '{scope}' scope"
            return False
        return True
