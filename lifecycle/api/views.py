"""Memories and turns (written by the tenant's policy and within its hot quota), pinning,
restoring a forgotten memory (journaled), the tenant's figures and policy (scope `admin`). Views
validate, call, serialise."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from episodes import curation, public_ids
from episodes import selectors as episode_selectors
from episodes import services as episode_services
from episodes.api import serializers as episode_serializers
from episodes.api.lookups import episode_or_404, not_found
from episodes.services import MemoryInput, TurnInput
from memory_platform.api.answers import answer_serializer
from memory_platform.api.base import TenantAPIView
from memory_platform.api.errors import Conflict, Gone, OverQuota, PayloadTooLarge
from memory_platform.conf import memory_settings

from .. import services
from ..models import MemoryPolicy, policy_row
from ..policy_json import PolicySerializer
from ..stats import TenantStats, tenant_stats
from . import answers

#: The 409 of a pin past the tenant's pinned cap (``lifecycle.quota``).
PINNED_CAP = OpenApiResponse(
    description="a pin past the tenant's pinned cap (hot_pinned_share of hot_quota_bytes); nothing was "
    "written. details: cap, cap_bytes, pinned_bytes (now), adding_bytes (this pin), hot_pinned_share, "
    "hot_quota_bytes"
)


def over_pinned_cap(exc: services.PinnedCapExceeded) -> OverQuota:
    return OverQuota(str(exc), exc.as_json())


class MemoriesView(TenantAPIView):
    @extend_schema(
        request=episode_serializers.MemoryInSerializer,
        responses={201: answers.MEMORY, 409: PINNED_CAP},
        summary="Write an explicit memory",
    )
    def post(self, request: Request) -> Response:
        serializer = episode_serializers.MemoryInSerializer(
            data=request.data, context={"tenant": self.tenant}
        )
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        try:
            episode = services.memory_create(
                tenant=self.tenant,
                memory=MemoryInput(
                    text=d["text"],
                    kind=d["kind"],
                    title=d.get("title", ""),
                    tags=tuple(d["tags"]),
                    metadata=d["metadata"],
                    anchor=d["anchor"],
                    scope=episode_serializers.owner_scope(d),
                    occurred_at=d.get("occurred_at"),
                    vector=d.get("vector"),
                    language=d.get("language", ""),
                ),
                now=timezone.now(),
            )
        except episode_services.UserForgotten as exc:
            raise Gone(str(exc)) from None
        except services.PinnedCapExceeded as exc:
            raise over_pinned_cap(exc) from None
        return Response(
            episode_selectors.episode_detail(tenant=self.tenant, episode=episode),
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        parameters=[episode_serializers.MemoryListQuerySerializer],
        responses={
            200: answer_serializer(answers.MemoryPage),
            404: OpenApiResponse(description="the cursor names no memory of the caller's"),
        },
        summary="List memories (cursor pages)",
        operation_id="v1_memories_list",
    )
    def get(self, request: Request) -> Response:
        query = episode_serializers.MemoryListQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        q = query.validated_data
        scope = episode_serializers.filter_scope(
            q,
            kinds=(q["kind"],) if q.get("kind") else (),
            layers=(q["layer"],) if q.get("layer") else (),
            states=(q["state"],) if q.get("state") else (),
            anchor=q.get("anchor"),
            tags=(q["tag"],) if q.get("tag") else (),
        )
        try:
            page, next_cursor = episode_selectors.episode_list(
                tenant=self.tenant, scope=scope, cursor=q.get("cursor"), limit=q["limit"]
            )
        except ValueError as exc:
            raise ValidationError({"cursor": [str(exc)]}) from None
        except LookupError as exc:
            raise NotFound(str(exc)) from None
        answer: answers.MemoryPage = {
            "results": episode_selectors.episode_page(tenant=self.tenant, episodes=page),
            "next_cursor": next_cursor,
        }
        return Response(answer)


class TurnsView(TenantAPIView):
    required_scope = "write"

    @extend_schema(
        request=episode_serializers.TurnsInSerializer,
        responses={201: answer_serializer(answers.TurnsWritten)},
        summary="Append turns (a batch)",
    )
    def post(self, request: Request) -> Response:
        turns = request.data.get("turns") if isinstance(request.data, dict) else None
        limit = int(memory_settings.MAX_BATCH_TURNS)
        if isinstance(turns, list) and len(turns) > limit:
            raise PayloadTooLarge(f"a batch holds at most {limit} turns; got {len(turns)}")
        serializer = episode_serializers.TurnsInSerializer(data=request.data, context={"tenant": self.tenant})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        chars, most = sum(len(t["text"]) for t in data["turns"]), int(memory_settings.MAX_SYNC_BATCH_CHARS)
        if chars > most and not data["async"]:
            raise PayloadTooLarge(
                f"a batch embedded before the answer holds at most {most} characters of text; this one "
                f'holds {chars}: send it with "async": true (a worker embeds and indexes it) or in smaller batches'
            )
        inputs = [
            TurnInput(
                role=t["role"],
                text=t["text"],
                scope=episode_serializers.owner_scope(t, data),
                occurred_at=t.get("occurred_at"),
                metadata={**data.get("metadata", {}), **t.get("metadata", {})},
                episode_boundary=t.get("episode_boundary", False),
                vector=t.get("vector"),
                language=t.get("language", ""),
            )
            for t in data["turns"]
        ]
        try:
            result = services.turns_ingest(
                tenant=self.tenant, turns=inputs, now=timezone.now(), asynchronous=data["async"]
            )
        except episode_services.UserForgotten as exc:
            raise Gone(str(exc)) from None
        written: answers.TurnsWritten = {
            "turns": [
                {"id": t.public_id, "episode_id": t.episode_public_id, "seq": t.seq} for t in result.turns
            ],
            "episode_ids": list(dict.fromkeys(t.episode_public_id for t in result.turns)),
            "searchable": result.indexed,
            "queued": result.queued,
            "reason": result.reason or None,
            "pending": episode_selectors.index_backlog(tenant=self.tenant) if result.queued else None,
        }
        return Response(written, status=status.HTTP_201_CREATED)


class MemoryAnchorView(TenantAPIView):
    required_scope = "write"

    def _set(self, episode_id: public_ids.Reference, anchor: bool) -> Response:
        try:
            episode = services.episode_pin(
                tenant=self.tenant,
                episode_id=episode_or_404(self.tenant, episode_id).pk,
                anchor=anchor,
                now=timezone.now(),
                actor=self.actor,
            )
        except episode_services.EpisodeNotFound:
            raise not_found(episode_id) from None
        except services.PinnedCapExceeded as exc:
            raise over_pinned_cap(exc) from None
        pinned: answers.Pinned = {"id": episode.public_id, "anchor": episode.anchor, "layer": episode.layer}
        return Response(pinned)

    @extend_schema(
        request=None,
        responses={200: answer_serializer(answers.Pinned), 409: PINNED_CAP},
        summary="Pin: never decays, never goes cold",
    )
    def post(self, request: Request, episode_id: public_ids.Reference) -> Response:
        return self._set(episode_id, True)

    @extend_schema(request=None, responses={200: answer_serializer(answers.Pinned)}, summary="Unpin")
    def delete(self, request: Request, episode_id: public_ids.Reference) -> Response:
        return self._set(episode_id, False)


class MemoryRestoreView(TenantAPIView):
    required_scope = "write"

    @extend_schema(
        request=None,
        responses={
            200: answers.MEMORY,
            409: OpenApiResponse(
                description="not forgotten, past the grace period, or "
                "a pinned memory past the tenant's pinned cap"
            ),
        },
        summary="Undo a forget within the grace period",
    )
    def post(self, request: Request, episode_id: public_ids.Reference) -> Response:
        try:
            episode = services.episode_restore(
                tenant=self.tenant,
                episode_id=episode_or_404(self.tenant, episode_id).pk,
                now=timezone.now(),
                actor=self.actor,
            )
        except episode_services.EpisodeNotFound:
            raise not_found(episode_id) from None
        except services.PinnedCapExceeded as exc:
            raise over_pinned_cap(exc) from None
        except episode_services.ConflictError as exc:
            raise Conflict(str(exc)) from None
        return Response(episode_selectors.episode_detail(tenant=self.tenant, episode=episode))


class StatsView(TenantAPIView):
    """The caller's tenant's figures: the console's numbers (``lifecycle.stats``)."""

    required_scope = "admin"

    @extend_schema(
        responses={
            200: OpenApiResponse(
                answer_serializer(TenantStats),
                description="the tenant's figures (see the README's Operating section)",
            )
        },
        summary="The tenant's figures: episodes and turns by layer and state, bytes, compression, "
        "searches and their latency, hits by layer, unpacks, feedback, ingest, ticks, candidates",
    )
    def get(self, request: Request) -> Response:
        return Response(tenant_stats([self.tenant], timezone.now())[self.tenant.pk])


POLICY_CONFLICT = OpenApiResponse(
    description="the fields together break a rule of the policy: an ordered pair (theta_delete < "
    "theta_active, hot_days < cold_days, the priority and the retrievability thresholds), "
    "warm_points_min <= warm_points_max, priority weights adding up to at most 1, the `llm` "
    "summariser without llm_base_url and llm_model, FSRS-6 parameters out of their bounds"
)


def _policy_with(policy: MemoryPolicy, data: Any) -> tuple[MemoryPolicy, dict[str, Any]]:
    """``policy`` with the request's fields applied (not saved), validated by the model's rules."""
    serializer = PolicySerializer(policy, data=data, partial=True)
    serializer.is_valid(raise_exception=True)
    for name, value in serializer.validated_data.items():
        setattr(policy, name, value)
    try:
        policy.full_clean()
    except DjangoValidationError as exc:
        # each field's own rule was the serializer's (400): what is left is a rule between fields
        rules = "; ".join(message for messages in exc.message_dict.values() for message in messages)
        raise Conflict(f"the policy's rules: {rules}") from None
    return policy, serializer.validated_data


class PolicyView(TenantAPIView):
    """The caller's tenant's memory policy (scope ``admin``): read it, change some of its fields."""

    required_scope = "admin"

    @extend_schema(responses=PolicySerializer, summary="The tenant's memory policy")
    def get(self, request: Request) -> Response:
        return Response(PolicySerializer(policy_row(self.tenant)).data)

    @extend_schema(
        request=PolicySerializer,
        responses={200: PolicySerializer, 409: POLICY_CONFLICT},
        summary="Change fields of the tenant's memory policy (validated as in the console; recorded)",
    )
    def patch(self, request: Request) -> Response:
        policy, _ = _policy_with(policy_row(self.tenant), request.data)
        services.policy_save(policy=policy, now=timezone.now(), actor=self.actor)
        return Response(PolicySerializer(policy).data)


class PolicyPreviewView(TenantAPIView):
    """What a tick now would do under the policy with the body's fields, saving nothing."""

    required_scope = "admin"

    @extend_schema(
        request=PolicySerializer,
        responses={
            200: OpenApiResponse(
                answer_serializer(answers.PolicyPreview),
                description="moves per step, errors, and sample episodes per kind of change",
            ),
            409: OpenApiResponse(
                description=f"a tick of the tenant is running, or {POLICY_CONFLICT.description}"
            ),
        },
        summary="Preview a policy: the moves a tick now would make under it, nothing written",
    )
    def post(self, request: Request) -> Response:
        policy, fields = _policy_with(policy_row(self.tenant), request.data)
        try:
            preview = services.tick_preview(tenant=self.tenant, now=timezone.now(), policy=policy.values())
        except services.TickBusy as exc:
            raise Conflict(str(exc)) from None
        previewed: answers.PolicyPreview = {"fields": sorted(fields), **preview}
        return Response(previewed)


class MemoryLinksView(TenantAPIView):
    required_scope = "write"
    delete_takes_body = True  # which link: {"target_id", "kind"}

    @extend_schema(
        request=episode_serializers.LinkInSerializer,
        responses={201: answer_serializer(answers.LinkMade), 200: answer_serializer(answers.LinkMade)},
        summary="Link two memories (200: it was there already)",
    )
    def post(self, request: Request, episode_id: public_ids.Reference) -> Response:
        serializer = episode_serializers.LinkInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        source, target = episode_or_404(self.tenant, episode_id), episode_or_404(self.tenant, d["target_id"])
        if source.pk == target.pk:
            raise Conflict("a memory cannot link to itself")
        try:
            link, created = curation.link_create(
                tenant=self.tenant, src_id=source.pk, dst_id=target.pk, kind=d["kind"], now=timezone.now()
            )
        except episode_services.EpisodeNotFound as exc:  # forgotten
            raise not_found(d["target_id"] if exc.args[0] == target.pk else episode_id) from None
        body: answers.LinkMade = {
            "source_id": source.public_id,
            "target_id": target.public_id,
            "kind": link.kind,
            "created": created,
        }
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(
        request=episode_serializers.LinkDeleteSerializer,
        responses={200: answer_serializer(answers.LinksRemoved)},
        summary="Remove a link (journaled: a rollback puts it back)",
    )
    def delete(self, request: Request, episode_id: public_ids.Reference) -> Response:
        serializer = episode_serializers.LinkDeleteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        source, target = episode_or_404(self.tenant, episode_id), episode_or_404(self.tenant, d["target_id"])
        try:
            deleted = services.link_remove(
                tenant=self.tenant,
                src_id=source.pk,
                dst_id=target.pk,
                kind=d.get("kind"),
                now=timezone.now(),
                actor=self.actor,
            )
        except episode_services.EpisodeNotFound:
            raise not_found(episode_id) from None
        if not deleted:
            raise NotFound("no such link")
        removed: answers.LinksRemoved = {"deleted": deleted}
        return Response(removed)
