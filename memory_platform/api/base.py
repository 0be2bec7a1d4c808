"""Base API views: the tenant comes from the authenticated key and scopes every query."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from memory_platform.tenancy.models import ApiKey, Tenant

logger = logging.getLogger(__name__)


class AfterResponse(Response):
    """A response with work to do once it has been sent: the WSGI server calls ``close()``
    after writing the body, before the request ends (the database connection is still open).
    Bookkeeping that the caller need not wait for goes here; an error in it is logged and
    never reaches the caller, who already has the answer."""

    def __init__(self, data: Any, *, after: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(data, **kwargs)
        self._after: Callable[[], None] | None = after

    def close(self) -> None:
        after, self._after = self._after, None
        try:
            if after is not None:
                after()
        except Exception:
            logger.exception("after-response work failed")
        finally:
            super().close()


class TenantAPIView(APIView):
    """Every subclass works inside ``self.tenant``; nothing reads a tenant from the request body."""

    required_scope: str | None = None

    @property
    def tenant(self) -> Tenant:
        return self.request.tenant  # type: ignore[attr-defined,no-any-return]

    @property
    def api_key(self) -> ApiKey:
        assert isinstance(self.request.auth, ApiKey)
        return self.request.auth

    def scoped(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(tenant=self.tenant)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
