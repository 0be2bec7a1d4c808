"""Data rights over the API (docs/decisions/0030-data-rights.md): export, import, and erasure of the
tenant's memory or of one person's (``POST /forget`` with ``erase``); and ``POST /forget`` by filter
or by retrievability threshold (soft, restorable). Export, import and erasure need scope ``admin``:
each reads or changes all of the tenant's memory."""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiRequest, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response

from episodes import selectors as episode_selectors
from episodes.api import serializers as episode_serializers
from lifecycle import services
from lifecycle.quota import PinnedCapExceeded
from memory_platform.api.answers import answer_serializer, one_of
from memory_platform.api.base import TenantAPIView
from memory_platform.api.errors import Conflict, OverQuota, PayloadTooLarge, ServiceUnavailable
from memory_platform.api.serializers import StrictSerializer
from memory_platform.conf import memory_settings
from memory_platform.tenancy.audit import EXPORT, audit_record
from memory_platform.tenancy.models import Tenant

from .. import erasure
from ..export import ExportFilter, export_lines
from ..imports import ImportSummary
from ..records import FormatError
from ..sources import FORMATS, import_body
from . import answers
from . import serializers as s


class ExportQuerySerializer(StrictSerializer):
    from_query = True
    user_id = serializers.CharField(required=False, max_length=200)
    session_id = serializers.CharField(required=False, max_length=200)
    since = serializers.DateTimeField(required=False, help_text="episodes that went on at or after this time")
    until = serializers.DateTimeField(required=False, help_text="episodes that began before this time")


class ExportView(TenantAPIView):
    required_scope = "admin"

    @extend_schema(
        parameters=[ExportQuerySerializer],
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(
                OpenApiTypes.STR,
                description="JSON lines: a header, the policy, each episode followed by its turns, "
                "links, journal entries, counters, and an end record with the counts (see the README)",
            )
        },
        summary="Export the tenant's memory as JSON lines (streamed)",
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        query = ExportQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        filters = ExportFilter(**query.validated_data)
        now = timezone.now()
        audit_record(
            tenant=self.tenant,
            action=EXPORT,
            actor=self.actor,
            now=now,
            filters=filters.as_json(),
        )
        response = StreamingHttpResponse(
            export_lines(tenant=self.tenant, filters=filters, now=now), content_type="application/x-ndjson"
        )
        response["Content-Disposition"] = (
            f'attachment; filename="{self.tenant.name}-{now:%Y%m%dT%H%M%S}.jsonl"'
        )
        return response


class ImportQuerySerializer(StrictSerializer):
    from_query = True

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # `source` is an attribute of every serializer, so the field is declared here. (Not
        # "format": that is DRF's own parameter, which picks the answer's renderer.)
        self.fields["source"] = serializers.ChoiceField(
            choices=FORMATS, required=False, help_text="the body's format; read off the body when left out"
        )


class RawBodyParser(BaseParser):
    """An import's body, left as it is: the view reads it within its own limit."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return None


#: The body as the schema states it: any text, but never empty (``sources.import_body``).
IMPORT_BODY = {
    "type": "string",
    "minLength": 1,
    "description": "UTF-8 JSON lines: this platform's export, mem0 memories (or a JSON document of "
    "them), or turns",
}
IMPORT_DESCRIPTION = (
    "The whole body is read and checked before anything is written. An empty body, one that is not "
    "UTF-8, a line that is not JSON or that nests deeper than MEMORY_MAX_JSON_DEPTH, holds the NUL "
    "character or a number that is not finite, and a record that breaks its format are each a 400 "
    "naming the line and the field. Importing the same body twice changes nothing."
)


class ImportView(TenantAPIView):
    required_scope = "admin"
    parser_classes = [RawBodyParser]

    @extend_schema(
        parameters=[ImportQuerySerializer],
        description=IMPORT_DESCRIPTION,
        request=OpenApiRequest(IMPORT_BODY),
        responses={
            200: OpenApiResponse(
                answer_serializer(ImportSummary),
                description="what was created, left unchanged, written over or skipped",
            ),
            400: OpenApiResponse(
                description="the body is empty, not UTF-8, or a line is not what its format says "
                "(`details.body` names the line and the field); nothing was written"
            ),
            409: OpenApiResponse(
                description="the import's pinned memories would take the tenant past its pinned cap; "
                "nothing was written (details as for a pin)"
            ),
            413: OpenApiResponse(description="the body is larger than MEMORY_MAX_IMPORT_BYTES"),
        },
        summary="Import JSON lines: this platform's export, mem0 memories, or turns (idempotent)",
    )
    def post(self, request: Request) -> Response:
        query = ImportQuerySerializer(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        fmt = query.validated_data.get("source")
        body = _body(request, int(memory_settings.MAX_IMPORT_BYTES))
        try:
            report = import_body(tenant=self.tenant, body=body, fmt=fmt, now=timezone.now(), actor=self.actor)
        except FormatError as exc:
            raise ValidationError({"body": [str(exc)]}) from None
        except PinnedCapExceeded as exc:  # checked before anything was written
            raise OverQuota(str(exc), exc.as_json()) from None
        return Response(report.as_json())


def _body(request: Request, limit: int) -> bytes:
    """The request's body, refused before it is read when it is over ``limit`` bytes."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise ValidationError({"body": ["Content-Length is not a number"]}) from None
    if length > limit:
        raise PayloadTooLarge(
            f"an import body holds at most {limit} bytes (MEMORY_MAX_IMPORT_BYTES); got {length}"
        )
    body = request._request.read(limit + 1)
    if len(body) > limit:
        raise PayloadTooLarge(f"an import body holds at most {limit} bytes (MEMORY_MAX_IMPORT_BYTES)")
    return bytes(body)


ERASURE_RESPONSES = {
    200: OpenApiResponse(
        one_of("Erasure", erasure.ErasureConfirm, erasure.ErasureReceipt),
        description="first call: {confirm, expires_in_seconds, will_erase}, nothing erased; second call "
        "(with confirm): the receipt, {erased, erased_at, removed (per store), verification (clean)}",
    ),
    409: OpenApiResponse(description="the confirm token is not this erasure's, or is older than 15 minutes"),
    503: OpenApiResponse(
        {
            "oneOf": [
                {"$ref": "#/components/schemas/ErasureReceipt"},
                {"$ref": "#/components/schemas/Error"},
            ]
        },
        description="Redis is down (nothing erased: the error), or the verification found something left "
        "(the receipt)",
    ),
}


class ConfirmSerializer(StrictSerializer):
    confirm = serializers.CharField(
        required=False, help_text="the token the first call answered; without it nothing is erased"
    )


def erase_or_confirm(
    *, tenant: Tenant, what: str, token: str | None, actor: str, holdings: dict[str, int]
) -> Response:
    """The two calls of an erasure: without ``token``, the token and what would go; with it, the
    erasure and its receipt (503 when a store is down before anything went, or when the
    verification pass still found something)."""
    now = timezone.now()
    if token is None:
        confirm: erasure.ErasureConfirm = {
            "confirm": erasure.erasure_token(tenant=tenant, what=what, now=now),
            "expires_in_seconds": int(erasure.TOKEN_TTL.total_seconds()),
            "will_erase": holdings,
        }
        return Response(confirm)
    try:
        erasure.check_token(tenant=tenant, what=what, token=token, now=now)
    except erasure.ErasureRefused as exc:  # well formed, but not a token for this: 409
        raise Conflict(str(exc)) from None
    try:
        if what == erasure.TENANT_DATA:
            receipt = erasure.erase_tenant_data(tenant=tenant, now=now, actor=actor)
        else:
            receipt = erasure.forget_user(
                tenant=tenant, user_id=what.removeprefix("user:"), now=now, actor=actor
            )
    except erasure.ErasureUnavailable as exc:
        raise ServiceUnavailable(str(exc)) from None
    return Response(receipt.as_json(), status=200 if receipt.clean else 503)


class TenantDataView(TenantAPIView):
    required_scope = "admin"

    @extend_schema(
        request=ConfirmSerializer,
        responses=ERASURE_RESPONSES,
        summary="Erase all of the tenant's memory for good (two calls; the tenant, policy and keys stay)",
    )
    def delete(self, request: Request) -> Response:
        body = ConfirmSerializer(data=request.data if isinstance(request.data, dict) else {})
        body.is_valid(raise_exception=True)
        return erase_or_confirm(
            tenant=self.tenant,
            what=erasure.TENANT_DATA,
            token=body.validated_data.get("confirm"),
            actor=self.actor,
            holdings=erasure.tenant_holdings(self.tenant),
        )


class ForgetView(TenantAPIView):
    required_scope = "write"

    @extend_schema(
        request=s.ForgetInSerializer,
        responses={
            **ERASURE_RESPONSES,
            200: OpenApiResponse(
                one_of("ForgetAnswer", answers.SoftForgotten, erasure.ErasureConfirm, erasure.ErasureReceipt),
                description="soft forget: {dry_run, count, ids}; with erase, as DELETE /tenant-data: "
                "first {confirm, expires_in_seconds, will_erase}, then the receipt",
            ),
        },
        summary="Soft forget by filter or by retrievability below a threshold (restorable; dry_run); "
        "or erase a user_id for good (erase, scope admin, two calls)",
    )
    def post(self, request: Request) -> Response:
        serializer = s.ForgetInSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        if d["erase"]:
            if not self.api_key.has_scope("admin"):
                raise PermissionDenied("erasing a user for good needs a key with scope admin")
            return erase_or_confirm(
                tenant=self.tenant,
                what=f"user:{d['user_id']}",
                token=d.get("confirm"),
                actor=self.actor,
                holdings=erasure.user_holdings(self.tenant, d["user_id"]),
            )
        now = timezone.now()
        scope = episode_serializers.filter_scope(
            d,
            kinds=(d["kind"],) if d.get("kind") else (),
            tags=tuple(d.get("tags") or ()),
            all_tags=True,
            layers=(d["layer"],) if d.get("layer") else (),
            older_than=d.get("older_than"),
            anchor=d.get("anchor"),
        )
        ids = services.forget_select(
            tenant=self.tenant, scope=scope, retrievability_below=d.get("retrievability_below"), now=now
        )
        if not d["dry_run"]:
            ids = services.forget_apply(tenant=self.tenant, episode_ids=ids, now=now, actor=self.actor)
        shown = episode_selectors.public_ids_of(self.tenant, ids)
        forgotten: answers.SoftForgotten = {
            "dry_run": d["dry_run"],
            "count": len(ids),
            "ids": [shown[i] for i in ids],
        }
        return Response(forgotten)
