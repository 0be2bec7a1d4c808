"""Search, activate, context, feedback: one APIView per operation."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from episodes.api.lookups import episodes_or_404, not_found
from episodes.api.serializers import filter_scope
from episodes.services import EpisodeNotFound
from memory_platform.api.answers import answer_serializer
from memory_platform.api.base import TenantAPIView
from memory_platform.api.errors import Conflict
from memory_platform.tenancy.models import Tenant

from .. import services, shaping, usage
from ..context import context
from ..evidence import Budget
from ..query import ACTIVE_ONLY, DEFAULT_SCOPE, SearchQuery
from ..weights import default_budget
from . import answers
from . import serializers as s


def check_min_score(tenant: Tenant, min_score: float | None, vector: Any) -> None:
    """``min_score`` is a similarity to the query's embedding: without one it could pass nothing."""
    if min_score is not None and vector is None and not services.query_embedded(tenant):
        raise ValidationError({"min_score": ["this tenant does not embed queries: send a vector with it"]})


class SearchView(TenantAPIView):
    required_scope = "read"

    @extend_schema(
        request=s.SearchInSerializer,
        responses={200: answer_serializer(answers.SearchAnswer)},
        summary="Hybrid search over all tiers",
    )
    def post(self, request: Request) -> Response:
        serializer = s.SearchInSerializer(data=request.data, context={"tenant": self.tenant})
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        scope = filter_scope(
            d,
            kinds=tuple(d["kinds"]),
            tags=tuple(d["tags"]),
            occurred_from=d.get("occurred_from"),
            occurred_to=d.get("occurred_to"),
            layers=tuple(dict.fromkeys(d["layers"])),
            states=DEFAULT_SCOPE.states if d["include_dormant"] else ACTIVE_ONLY,
        )
        query = SearchQuery(
            text=d["query"],
            vector=d.get("vector"),
            scope=scope,
            limit=d["limit"],
            depth=d["depth"],
            view=d["view"],
            explain=d["explain"],
            record_access=False,
            min_score=d.get("min_score"),
            hops=d.get("hops"),
        )
        check_min_score(self.tenant, query.min_score, query.vector)
        default = default_budget()
        now = timezone.now()
        # The accesses are queued and written in the background, many searches per statement.
        shaped = shaping.search_shaped(
            tenant=self.tenant,
            query=query,
            now=now,
            may_unpack=self.api_key.has_scope("write"),
            found=lambda ids, traversed: usage.recorder.add(self.tenant.id, ids, now, traversed),
            budget=Budget(
                tokens=d.get("max_tokens", default.tokens),
                neighbours=d.get("snippet_neighbours", default.neighbours),
            ),
        )
        return Response(answers.search_answer(shaped, explain=query.explain))


class ActivateView(TenantAPIView):
    required_scope = "read"

    @extend_schema(
        request=s.ActivateInSerializer,
        responses={200: answer_serializer(answers.ActivationAnswer)},
        summary="Top memories of one kind by score (activation)",
    )
    def post(self, request: Request) -> Response:
        serializer = s.ActivateInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        activation = shaping.activate(
            tenant=self.tenant,
            kind=d["kind"],
            query_text=d["query"],
            limit=d.get("limit"),
            now=timezone.now(),
            scope=filter_scope(d),
        )
        return Response(answers.activation_answer(activation))


class ContextView(TenantAPIView):
    required_scope = "read"

    @extend_schema(
        request=s.ContextInSerializer,
        responses={200: answer_serializer(answers.ContextAnswer)},
        summary="Prompt-ready context for a session within a token budget",
    )
    def post(self, request: Request) -> Response:
        serializer = s.ContextInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        check_min_score(self.tenant, d.get("min_score"), None)
        return Response(
            context(
                tenant=self.tenant,
                session_id=d.get("session_id") or None,
                query_text=d["query"],
                max_tokens=d["max_tokens"],
                now=timezone.now(),
                user_id=d.get("user_id") or None,
                agent_id=d.get("agent_id") or None,
                limit=d["limit"],
                min_score=d.get("min_score"),
                ids=d["ids"],
            )
        )


class FeedbackView(TenantAPIView):
    required_scope = "write"

    @extend_schema(
        request=s.FeedbackInSerializer,
        responses={
            200: answer_serializer(services.FeedbackCounts),
            404: OpenApiResponse(description="a named memory is not in the caller's tenant"),
            409: OpenApiResponse(description="a memory is named both used and unused"),
        },
        summary="Which returned memories were used",
    )
    def post(self, request: Request) -> Response:
        serializer = s.FeedbackInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        used, unused = episodes_or_404(self.tenant, d["used"]), episodes_or_404(self.tenant, d["unused"])
        both = sorted({n.public_id for n in used} & {n.public_id for n in unused})
        if both:
            raise Conflict(f"memories {both[:10]} are both used and unused")
        try:
            body = services.feedback(
                tenant=self.tenant,
                used=[n.pk for n in used],
                unused=[n.pk for n in unused],
                now=timezone.now(),
            )
        except EpisodeNotFound as exc:  # forgotten
            shown = {n.pk: n.public_id for n in used + unused}
            raise not_found(shown[exc.args[0]]) from None
        return Response(body)
