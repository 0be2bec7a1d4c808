"""Episodes in the console: computed scores, read-only layer and state, and the actions that go
through the lifecycle's services (journaled)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils import timezone

from episodes import curation
from episodes import services as episode_services
from episodes.admin import TurnInline
from episodes.models import Episode, Layer, Link, State
from memory_platform.admin_base import TenantScopedAdmin, admin_actor

from .. import scoring, services
from ..forgetting import forget_journaled

# --- episodes -----------------------------------------------------------------------------------------
_LIVE = [State.ACTIVE, State.DORMANT, State.DELETE_CANDIDATE]


def _degree(side: str, other: str) -> Coalesce:
    """Live links into (or out of) each listed episode, as a subquery per row of the page."""
    links = (
        Link.objects.filter(**{side: OuterRef("pk"), f"{other}__state__in": _LIVE})
        .order_by()
        .values(side)
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(links, output_field=IntegerField()), 0)


class OutLinkInline(admin.TabularInline):
    model = Link
    fk_name = "src"
    fields = ("dst", "kind", "created_at")
    raw_id_fields = ("dst",)
    extra = 0
    verbose_name = "outgoing link"


@admin.register(Episode)
class EpisodeAdmin(TenantScopedAdmin):
    """Layer, state and anchor are read-only: they change only through the actions, which go
    through the same services as the API (``transitions`` for layers), journaled."""

    list_display = (
        "id",
        "public_id",
        "title",
        "tenant",
        "kind",
        "layer",
        "state",
        "anchor",
        "turn_count",
        "activity_score",
        "retrievability",
        "priority",
        "access_count",
        "last_accessed_at",
        "last_occurred_at",
    )
    list_filter = ("tenant", "layer", "state", "kind", "anchor", "needs_reindex")
    list_select_related = ("tenant", "tenant__policy")
    search_fields = ("=public_id", "title", "search_text", "session_id", "user_id")
    date_hierarchy = "last_occurred_at"
    readonly_fields = (
        "public_id",
        "tenant",
        "layer",
        "state",
        "anchor",
        "state_before_forget",
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
    actions = ["unpack", "pack_warm", "pack_cold", "pin", "unpin", "forget", "restore"]
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # memories come in through the API

    def get_queryset(self, request: HttpRequest) -> QuerySet[Episode]:
        return (
            super()
            .get_queryset(request)
            .annotate(in_degree=_degree("dst", "src"), out_degree=_degree("src", "dst"))
        )

    # --- computed columns: scored at `now` under the tenant's policy, never stored ---------------
    def _stats(self, obj: Episode) -> scoring.EpisodeStats:
        degree = (getattr(obj, "in_degree", 0), getattr(obj, "out_degree", 0))
        return scoring.EpisodeStats.from_episode(obj, *degree)

    @admin.display(description="activity")
    def activity_score(self, obj: Episode) -> str:
        return f"{scoring.activity_score(self._stats(obj), obj.tenant.policy, timezone.now()):.2f}"

    @admin.display(description="R (FSRS)")
    def retrievability(self, obj: Episode) -> str:
        return f"{scoring.retrievability(self._stats(obj), obj.tenant.policy, timezone.now()):.2f}"

    @admin.display(description="priority")
    def priority(self, obj: Episode) -> str:
        return f"{scoring.priority(self._stats(obj), obj.tenant.policy, timezone.now()):.2f}"

    @admin.display(description="embedding")
    def embedding_dims(self, obj: Episode) -> str:
        return f"{len(obj.embedding)}-d" if obj.embedding is not None else "—"

    # --- actions -------------------------------------------------------------------------------------
    def _each(
        self, request: HttpRequest, queryset: QuerySet[Episode], fn: Callable[[Episode, str], Any], label: str
    ) -> None:
        done = 0
        actor = admin_actor(request)
        for episode in queryset.select_related("tenant"):
            try:
                fn(episode, actor)
                done += 1
            except (episode_services.EpisodeNotFound, episode_services.ConflictError, ValueError) as exc:
                self.message_user(request, f"#{episode.pk}: {exc}", messages.WARNING)
        self.message_user(request, f"{label} {done} episode(s)", messages.SUCCESS)

    @admin.action(description="Unpack: restore whole, back to hot (journaled)")
    def unpack(self, request: HttpRequest, queryset: QuerySet[Episode]) -> None:
        now = timezone.now()
        self._each(
            request,
            queryset,
            lambda e, actor: services.episode_unpack(tenant=e.tenant, episode_id=e.pk, now=now, actor=actor),
            "unpacked",
        )

    def _pack(self, request: HttpRequest, queryset: QuerySet[Episode], layer: str) -> None:
        now = timezone.now()
        self._each(
            request,
            queryset,
            lambda e, actor: services.episode_pack(
                tenant=e.tenant, episode_id=e.pk, layer=layer, now=now, actor=actor
            ),
            f"packed to {layer}",
        )

    @admin.action(description="Pack to warm now, as the tick would (journaled)")
    def pack_warm(self, request: HttpRequest, queryset: QuerySet[Episode]) -> None:
        self._pack(request, queryset, Layer.WARM)

    @admin.action(description="Pack to cold now, as the tick would (journaled)")
    def pack_cold(self, request: HttpRequest, queryset: QuerySet[Episode]) -> None:
        self._pack(request, queryset, Layer.COLD)

    def _pin(self, request: HttpRequest, queryset: QuerySet[Episode], anchor: bool) -> None:
        now = timezone.now()
        self._each(
            request,
            queryset,
            lambda e, actor: services.episode_pin(
                tenant=e.tenant, episode_id=e.pk, anchor=anchor, now=now, actor=actor
            ),
            "pinned" if anchor else "unpinned",
        )

    @admin.action(description="Pin (anchor; a cold episode comes back to hot)")
    def pin(self, request: HttpRequest, queryset: QuerySet[Episode]) -> None:
        self._pin(request, queryset, True)

    @admin.action(description="Unpin")
    def unpin(self, request: HttpRequest, queryset: QuerySet[Episode]) -> None:
        self._pin(request, queryset, False)

    @admin.action(description="Forget (soft, restorable, journaled)")
    def forget(self, request: HttpRequest, queryset: QuerySet[Episode]) -> None:
        now = timezone.now()
        self._each(
            request,
            queryset,
            lambda e, actor: forget_journaled(tenant=e.tenant, episode_id=e.pk, now=now, actor=actor),
            "forgot",
        )

    @admin.action(description="Restore forgotten")
    def restore(self, request: HttpRequest, queryset: QuerySet[Episode]) -> None:
        now = timezone.now()
        self._each(
            request,
            queryset,
            lambda e, actor: curation.episode_restore(tenant=e.tenant, episode_id=e.pk, now=now),
            "restored",
        )
