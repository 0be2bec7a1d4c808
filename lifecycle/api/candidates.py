"""The review of merge and delete proposals over the API (scope ``admin``): list them with both
memories side by side, approve or reject one by its id. A decision goes through the same service
as the console's (``lifecycle.candidates``): soft, journaled, within the caller's tenant."""

from __future__ import annotations

import re

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from episodes import public_ids
from memory_platform.api.answers import answer_serializer
from memory_platform.api.base import TenantAPIView
from memory_platform.api.errors import Conflict
from memory_platform.api.serializers import StrictSerializer

from .. import services
from ..models import Candidate
from ..selectors import (
    CandidatePage,
    CandidateReview,
    candidate_by_public_id,
    candidate_review,
    candidates_for_review,
)

_PUBLIC_ID = re.compile(public_ids.PATTERN)


class CandidatesQuerySerializer(StrictSerializer):
    from_query = True
    status = serializers.ChoiceField(choices=Candidate.Status.values, required=False, default="proposed")
    kind = serializers.ChoiceField(choices=Candidate.Kind.values, required=False)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)


class CandidatesView(TenantAPIView):
    required_scope = "admin"

    @extend_schema(
        parameters=[CandidatesQuerySerializer],
        responses={200: answer_serializer(CandidatePage)},
        summary="Merge and delete proposals, newest first, with both memories side by side",
    )
    def get(self, request: Request) -> Response:
        query = CandidatesQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        d = query.validated_data
        page: CandidatePage = {
            "results": candidates_for_review(
                self.tenant, status=d["status"], kind=d.get("kind"), limit=d["limit"]
            )
        }
        return Response(page)


DECIDED = {
    200: answer_serializer(CandidateReview),
    404: OpenApiResponse(description="no proposal of that id in the caller's tenant"),
    409: OpenApiResponse(
        description="already decided, a memory of it gone or forgotten since, or a merge across users"
    ),
}


class CandidateDecisionView(TenantAPIView):
    """Approve (apply softly: forget, or link and forget) or reject a proposal."""

    required_scope = "admin"
    decision = ""

    def post(self, request: Request, candidate_id: str) -> Response:
        candidate = (
            candidate_by_public_id(self.tenant, candidate_id) if _PUBLIC_ID.fullmatch(candidate_id) else None
        )
        if candidate is None:
            raise NotFound(f"no candidate {candidate_id}")
        decide = services.candidate_approve if self.decision == "approve" else services.candidate_reject
        try:
            decided = decide(candidate=candidate, now=timezone.now(), actor=self.actor)
        except services.CandidateError as exc:
            raise Conflict(str(exc)) from None
        return Response(candidate_review(decided))


class CandidateApproveView(CandidateDecisionView):
    decision = "approve"

    @extend_schema(request=None, responses=DECIDED, summary="Approve a proposal (soft, journaled)")
    def post(self, request: Request, candidate_id: str) -> Response:
        return super().post(request, candidate_id)


class CandidateRejectView(CandidateDecisionView):
    decision = "reject"

    @extend_schema(request=None, responses=DECIDED, summary="Reject a proposal (journaled)")
    def post(self, request: Request, candidate_id: str) -> Response:
        return super().post(request, candidate_id)
