"""Turns, memories, links, anchors, forget/restore. Views validate, call a service, serialise."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from memory_platform.api.base import TenantAPIView
from memory_platform.api.errors import Conflict, PayloadTooLarge
from memory_platform.conf import memory_settings

from .. import selectors, services
from ..services import MemoryInput, Scope, TurnInput
from . import serializers as s


def _scope(data: dict[str, Any], defaults: dict[str, Any] | None = None) -> Scope:
    defaults = defaults or {}
    return Scope(
        user_id=data.get("user_id", defaults.get("user_id", "")) or "",
        agent_id=data.get("agent_id", defaults.get("agent_id", "")) or "",
        session_id=data.get("session_id", defaults.get("session_id", "")) or "",
    )


def _not_found(episode_id: int) -> NotFound:
    return NotFound(f"memory {episode_id} not found")


class TurnsView(TenantAPIView):
    required_scope = "write"

    @extend_schema(request=s.TurnsInSerializer, responses={201: dict}, summary="Append turns (a batch)")
    def post(self, request: Request) -> Response:
        turns = request.data.get("turns") if isinstance(request.data, dict) else None
        limit = int(memory_settings.MAX_BATCH_TURNS)
        if isinstance(turns, list) and len(turns) > limit:
            raise PayloadTooLarge(f"a batch holds at most {limit} turns; got {len(turns)}")
        serializer = s.TurnsInSerializer(data=request.data, context={"tenant": self.tenant})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        inputs = [
            TurnInput(
                role=t["role"],
                text=t["text"],
                scope=_scope(t, data),
                occurred_at=t.get("occurred_at"),
                metadata={**data.get("metadata", {}), **t.get("metadata", {})},
                episode_boundary=t.get("episode_boundary", False),
                vector=t.get("vector"),
            )
            for t in data["turns"]
        ]
        result = services.turns_ingest(
            tenant=self.tenant, turns=inputs, now=timezone.now(), asynchronous=data["async"]
        )
        return Response(
            {
                "turns": [{"id": t.turn_id, "episode_id": t.episode_id, "seq": t.seq} for t in result.turns],
                "episode_ids": result.episode_ids,
                "searchable": result.indexed,
                "queued": result.queued,
            },
            status=status.HTTP_201_CREATED,
        )


class MemoriesView(TenantAPIView):
    @extend_schema(request=s.MemoryInSerializer, responses={201: dict}, summary="Write an explicit memory")
    def post(self, request: Request) -> Response:
        serializer = s.MemoryInSerializer(data=request.data, context={"tenant": self.tenant})
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        episode = services.memory_create(
            tenant=self.tenant,
            memory=MemoryInput(
                text=d["text"],
                kind=d["kind"],
                title=d.get("title", ""),
                tags=tuple(d["tags"]),
                metadata=d["metadata"],
                anchor=d["anchor"],
                scope=_scope(d),
                occurred_at=d.get("occurred_at"),
                vector=d.get("vector"),
            ),
            now=timezone.now(),
        )
        return Response(selectors.episode_shape(episode), status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[s.MemoryListQuerySerializer],
        responses={200: dict},
        summary="List memories (cursor pages)",
    )
    def get(self, request: Request) -> Response:
        query = s.MemoryListQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        q = query.validated_data
        filters = selectors.EpisodeFilters(
            **{
                k: q.get(k)
                for k in ("user_id", "agent_id", "session_id", "kind", "layer", "state", "anchor", "tag")
            }
        )
        try:
            page, next_cursor = selectors.episode_list(
                tenant=self.tenant, filters=filters, cursor=q.get("cursor"), limit=q["limit"]
            )
        except ValueError as exc:
            raise ValidationError({"cursor": [str(exc)]}) from None
        degree = selectors.degrees([e.pk for e in page])
        return Response(
            {
                "results": [selectors.episode_summary_shape(e, degree[e.pk]) for e in page],
                "next_cursor": next_cursor,
            }
        )


class MemoryDetailView(TenantAPIView):
    @extend_schema(
        parameters=[OpenApiParameter("depth", str, enum=["shallow", "deep"])],
        responses={200: dict},
        summary="Read one memory in its layer's shape",
    )
    def get(self, request: Request, episode_id: int) -> Response:
        depth = request.query_params.get("depth", "shallow")
        if depth not in {"shallow", "deep"}:
            raise ValidationError({"depth": ["must be 'shallow' or 'deep'"]})
        if depth == "deep":
            from retrieval.unpack import unpack  # the read path owns re-actualisation

            try:
                return Response(unpack(tenant=self.tenant, episode_id=episode_id, now=timezone.now()))
            except services.EpisodeNotFound:
                raise _not_found(episode_id) from None
        episode = selectors.episode_get(tenant=self.tenant, episode_id=episode_id)
        if episode is None:
            raise _not_found(episode_id)
        return Response(selectors.episode_shape(episode))

    @extend_schema(responses={200: dict}, summary="Soft forget (restorable for the grace period)")
    def delete(self, request: Request, episode_id: int) -> Response:
        try:
            episode = services.episode_forget(tenant=self.tenant, episode_id=episode_id, now=timezone.now())
        except services.EpisodeNotFound:
            raise _not_found(episode_id) from None
        return Response({"id": episode.pk, "state": episode.state, "forgotten_at": episode.forgotten_at})


class MemoryRestoreView(TenantAPIView):
    required_scope = "write"

    @extend_schema(request=None, responses={200: dict}, summary="Undo a forget within the grace period")
    def post(self, request: Request, episode_id: int) -> Response:
        try:
            episode = services.episode_restore(tenant=self.tenant, episode_id=episode_id, now=timezone.now())
        except services.EpisodeNotFound:
            raise _not_found(episode_id) from None
        except services.ConflictError as exc:
            raise Conflict(str(exc)) from None
        return Response(selectors.episode_shape(episode))


class MemoryAnchorView(TenantAPIView):
    required_scope = "write"

    def _set(self, episode_id: int, anchor: bool) -> Response:
        try:
            episode = services.episode_set_anchor(
                tenant=self.tenant, episode_id=episode_id, anchor=anchor, now=timezone.now()
            )
        except services.EpisodeNotFound:
            raise _not_found(episode_id) from None
        return Response({"id": episode.pk, "anchor": episode.anchor, "layer": episode.layer})

    @extend_schema(request=None, responses={200: dict}, summary="Pin: never decays, never goes cold")
    def post(self, request: Request, episode_id: int) -> Response:
        return self._set(episode_id, True)

    @extend_schema(request=None, responses={200: dict}, summary="Unpin")
    def delete(self, request: Request, episode_id: int) -> Response:
        return self._set(episode_id, False)


class MemoryLinksView(TenantAPIView):
    required_scope = "write"

    @extend_schema(request=s.LinkInSerializer, responses={201: dict}, summary="Link two memories")
    def post(self, request: Request, episode_id: int) -> Response:
        serializer = s.LinkInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        if d["target_id"] == episode_id:
            raise ValidationError({"target_id": ["a memory cannot link to itself"]})
        try:
            link, created = services.link_create(
                tenant=self.tenant,
                src_id=episode_id,
                dst_id=d["target_id"],
                kind=d["kind"],
                now=timezone.now(),
            )
        except services.EpisodeNotFound as exc:
            raise _not_found(exc.args[0]) from None
        body = {"source_id": link.src_id, "target_id": link.dst_id, "kind": link.kind, "created": created}
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(request=s.LinkDeleteSerializer, responses={200: dict}, summary="Remove a link")
    def delete(self, request: Request, episode_id: int) -> Response:
        serializer = s.LinkDeleteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        try:
            deleted = services.link_delete(
                tenant=self.tenant, src_id=episode_id, dst_id=d["target_id"], kind=d.get("kind")
            )
        except services.EpisodeNotFound:
            raise _not_found(episode_id) from None
        if not deleted:
            raise NotFound("no such link")
        return Response({"deleted": deleted})
