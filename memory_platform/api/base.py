"""Base API views: the tenant comes from the authenticated key and scopes every query."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework.request import Request
from rest_framework.views import APIView

from memory_platform.tenancy.models import ApiKey, Tenant


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
