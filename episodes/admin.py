from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from memory_platform.admin_base import ReadOnlyAdmin, TenantScopedAdmin

from .models import Link, Turn

# Episodes are administered by ``lifecycle.admin``: every change of an episode's layer or state
# goes through the lifecycle's services.


class TurnInline(admin.TabularInline):
    """An episode's turns, read-only (shown on the episode's page)."""

    model = Turn
    fields = ("seq", "role", "text", "occurred_at", "ingested_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("seq",)
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


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
class LinkAdmin(TenantScopedAdmin):
    list_display = ("id", "tenant", "src", "kind", "dst", "created_at")
    list_filter = ("tenant", "kind")
    list_select_related = ("tenant", "src", "dst")
    raw_id_fields = ("src", "dst")
