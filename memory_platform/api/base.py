"""How the tenant is enforced, end to end.

1. The API key, and only the key, names the tenant (``tenancy.authentication``: a prefixed,
   hashed key looked up by its prefix). No request field can name another tenant.
2. Every view subclasses ``TenantAPIView`` and passes ``self.tenant`` as its own keyword argument
   to every service and selector it calls; ids from the path or body are only ever looked up
   together with it.
3. Every store takes the tenant apart from the filter (``episodes.scope.Scope`` has no tenant
   field) and puts it in every statement: the ORM refuses a query on a tenant-owned model that
   names no tenant (``memory_platform.tenancy.scoping``: ``for_tenant``, or ``across_tenants`` with
   a reason in the few places that must cross, which one test lists), the warm/cold and by-id
   statements with ``tenant_id = %s`` in their WHERE (``episodes.stores.archive``,
   ``episodes.stores.rows``), Redis through the tenant's own index over its own key prefix, with
   the tenant tag in every query as well (``episodes.stores.hot``).

``tests/api/test_tenant_isolation.py`` and ``tests/api/test_retrieval_isolation.py`` hold an
outsider tenant to it.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.views import APIView

from memory_platform.tenancy.models import ApiKey, Tenant


class TenantAPIView(APIView):
    """Every subclass works inside ``self.tenant``; nothing reads a tenant from the request body."""

    required_scope: str | None = None

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # A parameter given twice would mean whichever one a view happened to read.
        repeated = sorted(name for name, values in request.query_params.lists() if len(values) > 1)
        if repeated:
            raise ValidationError({name: ["given more than once"] for name in repeated})

    @property
    def tenant(self) -> Tenant:
        return self.request.tenant  # type: ignore[attr-defined,no-any-return]

    @property
    def api_key(self) -> ApiKey:
        assert isinstance(self.request.auth, ApiKey)
        return self.request.auth

    @property
    def actor(self) -> str:
        """Who the journal and the audit say did a change: the calling key, by its prefix."""
        return f"api:{self.api_key.prefix}"
