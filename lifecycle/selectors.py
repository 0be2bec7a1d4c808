"""Reads of the lifecycle's records: ingest's segmentation rules from the policy (passed to
``episodes.services.turns_ingest`` as data), and the merge and delete proposals under review."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, TypedDict

from typing_extensions import Doc

from episodes.boundaries import shorten
from episodes.layers import Layer, State
from episodes.models import Episode
from episodes.segmentation import SegmentationRules
from memory_platform.tenancy.models import Tenant

from .models import Candidate
from .tenant_policy import Policy


def segmentation_rules(policy: Policy) -> SegmentationRules:
    return SegmentationRules(
        gap_seconds=int(policy.episode_gap_seconds),
        split_similarity=float(policy.episode_split_similarity),
        max_turns=int(policy.episode_max_turns),
    )


class CandidateMemory(TypedDict):
    """One memory of a proposal, as a reviewer compares it with the other."""

    id: str
    title: str
    text: Annotated[str, Doc("what it says in its layer (hot: its turns), cut at about 600 characters")]
    layer: Annotated[str, Layer]
    state: Annotated[str, State]
    user_id: str
    agent_id: str
    session_id: str
    last_occurred_at: datetime | None


class CandidateReview(TypedDict):
    """A merge or delete proposal with both memories side by side (docs/concepts.md#candidates-merges-and-deletes)."""

    id: str
    kind: Annotated[str, Doc("merge: `memory` into `other`; delete: forget `memory`")]
    status: Annotated[str, Doc("proposed, approved, rejected or applied")]
    score: Annotated[float, Doc("the activity score when proposed")]
    similarity: Annotated[float | None, Doc("merge: the two memories' embedding cosine")]
    created_at: datetime
    decided_at: datetime | None
    decided_by: str
    memory: CandidateMemory
    other: Annotated[CandidateMemory | None, Doc("merge: the memory that survives")]


class CandidatePage(TypedDict):
    """``GET /candidates``: proposals, newest first."""

    results: list[CandidateReview]


#: What a memory's text shows of itself in a review.
REVIEW_TEXT_CHARS = 600


def _reviewed(episode: Episode) -> CandidateMemory:
    return {
        "id": episode.public_id,
        "title": episode.title,
        "text": shorten(episode.search_text, REVIEW_TEXT_CHARS),
        "layer": episode.layer,
        "state": episode.state,
        "user_id": episode.user_id,
        "agent_id": episode.agent_id,
        "session_id": episode.session_id,
        "last_occurred_at": episode.last_occurred_at,
    }


def candidate_review(candidate: Candidate) -> CandidateReview:
    return {
        "id": candidate.public_id,
        "kind": candidate.kind,
        "status": candidate.status,
        "score": round(candidate.score, 3),
        "similarity": round(candidate.similarity, 3) if candidate.similarity is not None else None,
        "created_at": candidate.created_at,
        "decided_at": candidate.decided_at,
        "decided_by": candidate.decided_by,
        "memory": _reviewed(candidate.episode),
        "other": _reviewed(candidate.other) if candidate.other is not None else None,
    }


def candidates_for_review(
    tenant: Tenant, *, status: str = Candidate.Status.PROPOSED, kind: str | None = None, limit: int = 50
) -> list[CandidateReview]:
    """The tenant's proposals in ``status`` (of ``kind``), newest first, each with both memories."""
    found = Candidate.objects.for_tenant(tenant).filter(status=status)
    if kind:
        found = found.filter(kind=kind)
    found = found.select_related("episode", "other").order_by("-created_at", "-id")[:limit]
    return [candidate_review(c) for c in found]


def candidate_by_public_id(tenant: Tenant, public_id: str) -> Candidate | None:
    """The tenant's proposal of that public id (None for another tenant's or an unknown id)."""
    return (
        Candidate.objects.for_tenant(tenant)
        .filter(public_id=public_id.upper())
        .select_related("tenant", "episode", "other")
        .first()
    )
