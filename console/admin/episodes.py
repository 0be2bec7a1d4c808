"""Episodes in the console: computed scores, read-only layer and state, and the actions and hand
edits that go through the lifecycle's services (journaled, so each can be rolled back)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils import timezone

from episodes import services as episode_services
from episodes.admin import TurnInline
from episodes.models import Episode, Layer, Link, State
from lifecycle import scoring, services
from lifecycle.journal import EDITABLE_FIELDS
from lifecycle.tenant_policy import Policy
from memory_platform.admin_base import ReadOnlyInline, TenantScopedAdmin, admin_actor

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


class OutLinkInline(ReadOnlyInline):
    """Read-only: a hand-made or hand-removed link would be in no journal."""

    model = Link
    fk_name = "src"
    fields = ("dst", "kind", "created_at")
    readonly_fields = fields
    extra = 0
    verbose_name = "outgoing link"
    verbose_name_plural = (
        "outgoing links (read-only: links are made and removed through the API, /memories/{id}/links)"
    )


#: Shown, never edited by hand: everything but ``journal.EDITABLE_FIELDS`` (the vector is not shown).
_READ_ONLY = tuple(
    f.name
    for f in Episode._meta.concrete_fields
    if f.name not in EDITABLE_FIELDS and f.name not in {"id", "embedding", "search_vector"}
)


@admin.register(Episode)
class EpisodeAdmin(TenantScopedAdmin):
    """Only ``journal.EDITABLE_FIELDS`` are editable, and a save goes through
    ``services.episode_edit`` (journaled). Layer, state and anchor change only through the actions,
    which go through the same services as the API (``transitions`` for layers), journaled. A
    forgotten episode is read-only, and nothing deletes an episode here: forgetting is the action,
    and the purge after the grace period the only way out."""

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
    readonly_fields = (*_READ_ONLY, "embedding_dims")
    exclude = ("embedding",)
    inlines = [TurnInline, OutLinkInline]
    actions = ["unpack", "pack_warm", "pack_cold", "pin", "unpin", "forget", "restore"]
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # memories come in through the API

    def has_change_permission(self, request: HttpRequest, obj: Episode | None = None) -> bool:
        if obj is not None and obj.state == State.FORGOTTEN:
            return False  # restore it first (an action)
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Episode | None = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Episode, form: forms.ModelForm, change: bool) -> None:
        """Only what the operator changed, through the journaled service (never ``obj.save()``)."""
        services.episode_edit(
            tenant=obj.tenant,
            episode_id=obj.pk,
            changes={name: form.cleaned_data[name] for name in form.changed_data},
            now=timezone.now(),
            actor=admin_actor(request),
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Episode]:
        return (
            super()
            .get_queryset(request)
            .annotate(in_degree=_degree("dst", "src"), out_degree=_degree("src", "dst"))
        )

    # --- computed columns: scored at `now` under the tenant's policy, never stored ---------------
    def _policy(self, obj: Episode) -> Policy:
        # The page's rows come with their tenant's policy row (list_select_related).
        return obj.tenant.policy.values()

    def _stats(self, obj: Episode) -> scoring.EpisodeStats:
        degree = (getattr(obj, "in_degree", 0), getattr(obj, "out_degree", 0))
        return scoring.EpisodeStats.from_episode(obj, *degree)

    @admin.display(description="activity")
    def activity_score(self, obj: Episode) -> str:
        return f"{scoring.activity_score(self._stats(obj), self._policy(obj), timezone.now()):.2f}"

    @admin.display(description="R (FSRS)")
    def retrievability(self, obj: Episode) -> str:
        return f"{scoring.retrievability(self._stats(obj), self._policy(obj), timezone.now()):.2f}"

    @admin.display(description="priority")
    def priority(self, obj: Episode) -> str:
        return f"{scoring.priority(self._stats(obj), self._policy(obj), timezone.now()):.2f}"

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
            lambda e, actor: services.forget_journaled(
                tenant=e.tenant, episode_id=e.pk, now=now, actor=actor
            ),
            "forgot",
        )

    @admin.action(description="Restore forgotten (within the grace period, journaled)")
    def restore(self, request: HttpRequest, queryset: QuerySet[Episode]) -> None:
        now = timezone.now()
        self._each(
            request,
            queryset,
            lambda e, actor: services.episode_restore(tenant=e.tenant, episode_id=e.pk, now=now, actor=actor),
            "restored",
        )
