"""Restore and links. Views validate, call a service, serialise.

Writing and listing memories, turns and pinning are served by ``lifecycle.api`` (writes follow the
tenant's policy and quota, pins move layers), reading one memory by ``retrieval.api``.
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from memory_platform.api.base import TenantAPIView
from memory_platform.api.errors import Conflict

from .. import selectors, services
from . import serializers as s


def not_found(episode_id: int) -> NotFound:
    return NotFound(f"memory {episode_id} not found")


class MemoryRestoreView(TenantAPIView):
    required_scope = "write"

    @extend_schema(request=None, responses={200: dict}, summary="Undo a forget within the grace period")
    def post(self, request: Request, episode_id: int) -> Response:
        try:
            episode = services.episode_restore(tenant=self.tenant, episode_id=episode_id, now=timezone.now())
        except services.EpisodeNotFound:
            raise not_found(episode_id) from None
        except services.ConflictError as exc:
            raise Conflict(str(exc)) from None
        return Response(selectors.episode_detail(tenant=self.tenant, episode=episode))


class MemoryLinksView(TenantAPIView):
    required_scope = "write"
    delete_takes_body = True  # which link: {"target_id", "kind"}

    @extend_schema(request=s.LinkInSerializer, responses={201: dict}, summary="Link two memories")
    def post(self, request: Request, episode_id: int) -> Response:
        serializer = s.LinkInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        if d["target_id"] == episode_id:
            raise Conflict("a memory cannot link to itself")
        try:
            link, created = services.link_create(
                tenant=self.tenant,
                src_id=episode_id,
                dst_id=d["target_id"],
                kind=d["kind"],
                now=timezone.now(),
            )
        except services.EpisodeNotFound as exc:
            raise not_found(exc.args[0]) from None
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
            raise not_found(episode_id) from None
        if not deleted:
            raise NotFound("no such link")
        return Response({"deleted": deleted})
