"""One memory read, forgotten or unpacked: ``GET`` and ``DELETE /memories/{id}``,
``POST /memories/{id}/unpack`` (the other ``/memories`` routes are in ``views``)."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from episodes import public_ids, selectors
from episodes.api.lookups import episode_or_404, not_found
from episodes.services import EpisodeNotFound
from episodes.shapes import Memory
from memory_platform.api.answers import answer_serializer, one_of
from memory_platform.api.base import TenantAPIView

from .. import services as lifecycle_services
from ..unpack import UnpackedMemory, unpack
from . import answers

#: ``GET /memories/{id}``: the memory in its layer's shape (unpacked, with a write key and ``deep``).
MEMORY_READ = one_of("MemoryRead", *Memory.__args__, UnpackedMemory)


class MemoryDetailView(TenantAPIView):
    @extend_schema(
        parameters=[OpenApiParameter("depth", str, enum=["shallow", "deep"])],
        responses={200: MEMORY_READ},
        summary="Read one memory in its layer's shape (deep: whole; a write key also unpacks it to hot)",
    )
    def get(self, request: Request, episode_id: public_ids.Reference) -> Response:
        depth = request.query_params.get("depth", "shallow")
        if depth not in {"shallow", "deep"}:
            raise ValidationError({"depth": ["must be 'shallow' or 'deep'"]})
        episode = selectors.episode_get(tenant=self.tenant, reference=episode_id)
        if episode is None:
            raise not_found(episode_id)
        if depth == "deep" and self.api_key.has_scope("write"):
            try:
                return Response(unpack(tenant=self.tenant, episode_id=episode.pk, now=timezone.now()))
            except EpisodeNotFound:  # forgotten meanwhile
                raise not_found(episode_id) from None
        # A read key reads a packed episode whole where it is: moving it would be a write.
        return Response(selectors.episode_detail(tenant=self.tenant, episode=episode, deep=depth == "deep"))

    @extend_schema(
        responses={200: answer_serializer(answers.Forgotten)},
        summary="Soft forget (restorable for the grace period)",
    )
    def delete(self, request: Request, episode_id: public_ids.Reference) -> Response:
        try:
            episode = lifecycle_services.forget_journaled(
                tenant=self.tenant,
                episode_id=episode_or_404(self.tenant, episode_id).pk,
                now=timezone.now(),
                actor=self.actor,
            )
        except EpisodeNotFound:
            raise not_found(episode_id) from None
        forgotten: answers.Forgotten = {
            "id": episode.public_id,
            "state": episode.state,
            "forgotten_at": episode.forgotten_at,
        }
        return Response(forgotten)


class UnpackView(TenantAPIView):
    required_scope = "write"

    @extend_schema(
        request=None,
        responses={200: answer_serializer(UnpackedMemory)},
        summary="Deep unpack: restore whole, back to hot",
    )
    def post(self, request: Request, episode_id: public_ids.Reference) -> Response:
        try:
            return Response(
                unpack(
                    tenant=self.tenant,
                    episode_id=episode_or_404(self.tenant, episode_id).pk,
                    now=timezone.now(),
                )
            )
        except EpisodeNotFound:
            raise not_found(episode_id) from None
