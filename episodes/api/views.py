"""Links. Views validate, call a service, serialise.

Writing and listing memories, turns, pinning and restoring are served by ``lifecycle.api`` (writes
follow the tenant's policy and quota, pins move layers, a restore is journaled), reading and
forgetting one memory by ``retrieval.api``.
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
from memory_platform.tenancy.models import Tenant

from .. import curation, public_ids, selectors, services
from . import serializers as s


def not_found(reference: public_ids.Reference) -> NotFound:
    return NotFound(f"memory {reference} not found")


def named(tenant: Tenant, reference: public_ids.Reference) -> selectors.Named:
    """The tenant's episode a path or a body names (forgotten ones included). Raises NotFound."""
    found = selectors.episodes_named(tenant, [reference]).get(reference)
    if found is None:
        raise not_found(reference)
    return found


def named_all(tenant: Tenant, references: list[public_ids.Reference]) -> list[selectors.Named]:
    """The tenant's episodes a body names, in order. Raises NotFound for the first it does not hold."""
    found = selectors.episodes_named(tenant, references)
    for reference in references:
        if reference not in found:
            raise not_found(reference)
    return [found[r] for r in references]


class MemoryLinksView(TenantAPIView):
    required_scope = "write"
    delete_takes_body = True  # which link: {"target_id", "kind"}

    @extend_schema(request=s.LinkInSerializer, responses={201: dict}, summary="Link two memories")
    def post(self, request: Request, episode_id: public_ids.Reference) -> Response:
        serializer = s.LinkInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        source, target = named(self.tenant, episode_id), named(self.tenant, d["target_id"])
        if source.pk == target.pk:
            raise Conflict("a memory cannot link to itself")
        try:
            link, created = curation.link_create(
                tenant=self.tenant, src_id=source.pk, dst_id=target.pk, kind=d["kind"], now=timezone.now()
            )
        except services.EpisodeNotFound as exc:  # forgotten
            raise not_found(d["target_id"] if exc.args[0] == target.pk else episode_id) from None
        body = {
            "source_id": source.public_id,
            "target_id": target.public_id,
            "kind": link.kind,
            "created": created,
        }
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(request=s.LinkDeleteSerializer, responses={200: dict}, summary="Remove a link")
    def delete(self, request: Request, episode_id: public_ids.Reference) -> Response:
        serializer = s.LinkDeleteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        source, target = named(self.tenant, episode_id), named(self.tenant, d["target_id"])
        try:
            deleted = curation.link_delete(
                tenant=self.tenant, src_id=source.pk, dst_id=target.pk, kind=d.get("kind")
            )
        except services.EpisodeNotFound:
            raise not_found(episode_id) from None
        if not deleted:
            raise NotFound("no such link")
        return Response({"deleted": deleted})
