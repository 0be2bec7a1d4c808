from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils import timezone

from memory_platform.admin_base import ReadOnlyAdmin

from . import services
from .models import Episode, Link, Turn


class TurnInline(admin.TabularInline):
    model = Turn
    fields = ("seq", "role", "text", "occurred_at", "ingested_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("seq",)
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class OutLinkInline(admin.TabularInline):
    model = Link
    fk_name = "src"
    fields = ("dst", "kind", "created_at")
    raw_id_fields = ("dst",)
    extra = 0
    verbose_name = "outgoing link"


@admin.register(Episode)
class EpisodeAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "title",
        "tenant",
        "kind",
        "layer",
        "state",
        "anchor",
        "turn_count",
        "access_count",
        "last_accessed_at",
        "last_occurred_at",
    )
    list_filter = ("tenant", "layer", "state", "kind", "anchor", "needs_reindex")
    list_select_related = ("tenant",)
    search_fields = ("title", "search_text", "session_id", "user_id")
    date_hierarchy = "last_occurred_at"
    readonly_fields = (
        "tenant",
        "embedding_dims",
        "search_text",
        "version",
        "raw_chars",
        "packed_chars",
        "created_at",
        "first_occurred_at",
        "last_occurred_at",
        "turn_count",
        "access_count",
        "traverse_count",
        "last_accessed_at",
        "last_linked_at",
        "stability",
        "difficulty",
        "last_review_at",
        "forgotten_at",
        "restored_at",
        "needs_reindex",
    )
    exclude = ("embedding",)
    inlines = [TurnInline, OutLinkInline]
    actions = ["pin", "unpin", "forget", "restore"]
    list_per_page = 50

    @admin.display(description="embedding")
    def embedding_dims(self, obj: Episode) -> str:
        return "384-d" if obj.embedding is not None else "—"

    def _each(self, request: HttpRequest, queryset: Any, fn: Any, label: str) -> None:
        done = 0
        for episode in queryset.select_related("tenant"):
            try:
                fn(episode)
                done += 1
            except (services.EpisodeNotFound, services.ConflictError) as exc:
                self.message_user(request, f"#{episode.pk}: {exc}", messages.WARNING)
        self.message_user(request, f"{label} {done} episode(s)", messages.SUCCESS)

    @admin.action(description="Pin (anchor)")
    def pin(self, request: HttpRequest, queryset: Any) -> None:
        now = timezone.now()
        self._each(
            request,
            queryset,
            lambda e: services.episode_set_anchor(tenant=e.tenant, episode_id=e.pk, anchor=True, now=now),
            "pinned",
        )

    @admin.action(description="Unpin")
    def unpin(self, request: HttpRequest, queryset: Any) -> None:
        now = timezone.now()
        self._each(
            request,
            queryset,
            lambda e: services.episode_set_anchor(tenant=e.tenant, episode_id=e.pk, anchor=False, now=now),
            "unpinned",
        )

    @admin.action(description="Forget (soft, restorable)")
    def forget(self, request: HttpRequest, queryset: Any) -> None:
        now = timezone.now()
        self._each(
            request,
            queryset,
            lambda e: services.episode_forget(tenant=e.tenant, episode_id=e.pk, now=now),
            "forgot",
        )

    @admin.action(description="Restore forgotten")
    def restore(self, request: HttpRequest, queryset: Any) -> None:
        now = timezone.now()
        self._each(
            request,
            queryset,
            lambda e: services.episode_restore(tenant=e.tenant, episode_id=e.pk, now=now),
            "restored",
        )


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "session_id", "seq", "role", "short_text", "occurred_at", "episode")
    list_filter = ("tenant", "role")
    list_select_related = ("tenant", "episode")
    search_fields = ("text", "session_id")
    exclude = ("embedding",)
    raw_id_fields = ("episode",)

    @admin.display(description="text")
    def short_text(self, obj: Turn) -> str:
        return obj.text[:80]


@admin.register(Link)
class LinkAdmin(admin.ModelAdmin):
    list_display = ("id", "tenant", "src", "kind", "dst", "created_at")
    list_filter = ("tenant", "kind")
    list_select_related = ("tenant", "src", "dst")
    raw_id_fields = ("src", "dst")
