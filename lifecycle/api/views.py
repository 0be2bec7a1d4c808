"""`POST /forget` (seed 004 Forget and ForgetByThreshold). Views validate, call, serialise."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memory_platform.api.base import TenantAPIView

from .. import services
from . import serializers as s


class ForgetView(TenantAPIView):
    required_scope = "write"

    @extend_schema(
        request=s.ForgetInSerializer,
        responses=inline_serializer(
            "ForgetResult",
            {
                "dry_run": serializers.BooleanField(),
                "count": serializers.IntegerField(),
                "ids": serializers.ListField(child=serializers.IntegerField()),
            },
        ),
        summary="Soft forget by filter or by retrievability below a threshold (restorable; dry_run)",
    )
    def post(self, request: Request) -> Response:
        serializer = s.ForgetInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        now = timezone.now()
        filters = services.ForgetFilters(
            kind=d.get("kind") or None,
            user_id=d.get("user_id") or None,
            agent_id=d.get("agent_id") or None,
            session_id=d.get("session_id") or None,
            tags=tuple(d.get("tags") or ()),
            layer=d.get("layer"),
            older_than=d.get("older_than"),
            anchor=d.get("anchor"),
        )
        ids = services.forget_select(
            tenant=self.tenant, filters=filters, retrievability_below=d.get("retrievability_below"), now=now
        )
        if not d["dry_run"]:
            ids = services.forget_apply(
                tenant=self.tenant, episode_ids=ids, now=now, actor=f"api:{self.api_key.prefix}"
            )
        return Response({"dry_run": d["dry_run"], "count": len(ids), "ids": ids})
