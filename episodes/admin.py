from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from memory_platform.admin_base import ReadOnlyAdmin, ReadOnlyInline, admin_actor
from memory_platform.tenancy.audit import FORGET_USER_LIFTED, audit_record

from .models import ForgottenUser, Link, Turn

# Episodes are administered by ``console.admin``: every change of an episode goes through the
# lifecycle's services, journaled. Turns are verbatim and links are the API's, so both are read
# here and changed nowhere in the console.


class TurnInline(ReadOnlyInline):
    """An episode's turns, shown on its page: what was said, never edited, added or deleted by hand."""

    model = Turn
    fields = ("seq", "role", "text", "occurred_at", "ingested_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("seq",)


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "public_id",
        "tenant",
        "session_id",
        "seq",
        "role",
        "short_text",
        "occurred_at",
        "episode",
    )
    list_filter = ("tenant", "role")
    list_select_related = ("tenant", "episode")
    search_fields = ("=public_id", "text", "session_id")
    exclude = ("embedding",)
    raw_id_fields = ("episode",)

    @admin.display(description="text")
    def short_text(self, obj: Turn) -> str:
        return obj.text[:80]


@admin.register(Link)
class LinkAdmin(ReadOnlyAdmin):
    """Read-only: links are made and removed through the API (``/api/v1/memories/{id}/links``);
    a merge's link comes and goes with its journal entry."""

    list_display = ("id", "tenant", "src", "kind", "dst", "created_at")
    list_filter = ("tenant", "kind")
    list_select_related = ("tenant", "src", "dst")
    raw_id_fields = ("src", "dst")


@admin.register(ForgottenUser)
class ForgottenUserAdmin(ReadOnlyAdmin):
    """People erased from a tenant for good: their ``user_id`` is refused on every write (410).
    Deleting a row lets that id write again (the person came back and asked to be remembered)."""

    list_display = ("user_hash", "tenant", "forgotten_at")
    list_filter = ("tenant",)
    list_select_related = ("tenant",)
    date_hierarchy = "forgotten_at"

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.has_perm("episodes.delete_forgottenuser"))

    def delete_model(self, request: HttpRequest, obj: ForgottenUser) -> None:
        self.delete_queryset(request, ForgottenUser.objects.for_tenant(obj.tenant_id).filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ForgottenUser]) -> None:
        """Lifting a tombstone is audited: who let which (hashed) user_id write again, and when."""
        now = timezone.now()
        with transaction.atomic():
            for tombstone in queryset.select_related("tenant"):
                audit_record(
                    tenant=tombstone.tenant,
                    action=FORGET_USER_LIFTED,
                    actor=admin_actor(request),
                    now=now,
                    user_hash=tombstone.user_hash,
                )
            queryset.delete()
