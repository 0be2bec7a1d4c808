from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from .base import TenantAPIView


class WhoAmIView(TenantAPIView):
    required_scope = "read"

    @extend_schema(
        responses=inline_serializer(
            "WhoAmI",
            {
                "tenant": serializers.CharField(),
                "tenant_id": serializers.UUIDField(),
                "key_prefix": serializers.CharField(),
                "scopes": serializers.ListField(child=serializers.CharField()),
            },
        )
    )
    def get(self, request: Request) -> Response:
        return Response(
            {
                "tenant": self.tenant.name,
                "tenant_id": str(self.tenant.id),
                "key_prefix": self.api_key.prefix,
                "scopes": self.api_key.scopes,
            }
        )
