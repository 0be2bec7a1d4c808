from __future__ import annotations

from typing import Annotated, TypedDict
from uuid import UUID

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from .answers import Doc, answer_serializer
from .base import TenantAPIView


class WhoAmI(TypedDict):
    """``GET /whoami``: the tenant and the scopes the caller's key decides."""

    tenant: str
    tenant_id: UUID
    key_prefix: Annotated[str, Doc("the key's public part")]
    scopes: list[str]


class WhoAmIView(TenantAPIView):
    required_scope = "read"

    @extend_schema(responses=answer_serializer(WhoAmI))
    def get(self, request: Request) -> Response:
        answer: WhoAmI = {
            "tenant": self.tenant.name,
            "tenant_id": self.tenant.id,
            "key_prefix": self.api_key.prefix,
            "scopes": self.api_key.scopes,
        }
        return Response(answer)
