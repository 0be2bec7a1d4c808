"""Search, activate, context, unpack, feedback: one APIView per operation."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from episodes.services import EpisodeNotFound
from memory_platform.api.base import TenantAPIView

from .. import services, usage
from ..context import context
from ..query import SearchQuery
from ..unpack import unpack
from . import serializers as s


def _scope(d: dict) -> dict:
    return {k: (d.get(k) or None) for k in ("user_id", "agent_id", "session_id")}


class SearchView(TenantAPIView):
    required_scope = "read"

    @extend_schema(
        request=s.SearchInSerializer, responses={200: dict}, summary="Hybrid search over all tiers"
    )
    def post(self, request: Request) -> Response:
        serializer = s.SearchInSerializer(data=request.data, context={"tenant": self.tenant})
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        query = SearchQuery(
            text=d["query"],
            vector=d.get("vector"),
            kinds=tuple(d["kinds"]),
            tags=tuple(d["tags"]),
            occurred_from=d.get("occurred_from"),
            occurred_to=d.get("occurred_to"),
            layers=tuple(dict.fromkeys(d["layers"])),
            limit=d["limit"],
            depth=d["depth"],
            include_dormant=d["include_dormant"],
            explain=d["explain"],
            record_access=False,
            **_scope(d),
        )
        now = timezone.now()
        body = services.search_shaped(tenant=self.tenant, query=query, now=now)
        # The accesses are queued and written in the background, many searches per statement.
        usage.recorder.add(self.tenant.id, [hit["episode_id"] for hit in body["results"]], now)
        return Response(body)


class ActivateView(TenantAPIView):
    required_scope = "read"

    @extend_schema(
        request=s.ActivateInSerializer,
        responses={200: dict},
        summary="Top memories of one kind by score (seed 000 activation)",
    )
    def post(self, request: Request) -> Response:
        serializer = s.ActivateInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        limit = d.get("limit") or services.activation_limit(self.tenant)
        return Response(
            services.activate(
                tenant=self.tenant,
                kind=d["kind"],
                query_text=d["query"],
                limit=limit,
                now=timezone.now(),
                scope=_scope(d),
            )
        )


class ContextView(TenantAPIView):
    required_scope = "read"

    @extend_schema(
        request=s.ContextInSerializer,
        responses={200: dict},
        summary="Prompt-ready context for a session within a token budget",
    )
    def post(self, request: Request) -> Response:
        serializer = s.ContextInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        scope = _scope(d)
        return Response(
            context(
                tenant=self.tenant,
                session_id=scope["session_id"],
                query_text=d["query"],
                max_tokens=d["max_tokens"],
                now=timezone.now(),
                user_id=scope["user_id"],
                agent_id=scope["agent_id"],
                limit=d["limit"],
            )
        )


class UnpackView(TenantAPIView):
    required_scope = "write"

    @extend_schema(request=None, responses={200: dict}, summary="Deep unpack: restore whole, back to hot")
    def post(self, request: Request, episode_id: int) -> Response:
        try:
            return Response(unpack(tenant=self.tenant, episode_id=episode_id, now=timezone.now()))
        except EpisodeNotFound:
            raise NotFound(f"memory {episode_id} not found") from None


class FeedbackView(TenantAPIView):
    required_scope = "write"

    @extend_schema(
        request=s.FeedbackInSerializer, responses={200: dict}, summary="Which returned memories were used"
    )
    def post(self, request: Request) -> Response:
        serializer = s.FeedbackInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        try:
            body = services.feedback(
                tenant=self.tenant, used=d["used"], unused=d["unused"], now=timezone.now()
            )
        except EpisodeNotFound as exc:
            raise NotFound(f"memory {exc.args[0]} not found") from None
        return Response(body)
