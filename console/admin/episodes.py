"""Episodes in the console: read-only pages with computed scores, and the buttons and list actions
that go through the lifecycle's services (journaled, so each can be rolled back)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.views.decorators.http import require_POST

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
    fields = ("linked_to", "kind", "created_at")
    readonly_fields = fields
    extra = 0
    verbose_name = "outgoing link"
    verbose_name_plural = "outgoing links (read-only: made and removed through the API)"

    @admin.display(description="to")
    def linked_to(self, obj: Link) -> str:
        url = reverse("admin:episodes_episode_change", args=[obj.dst_id])
        return format_html('<a class="text-primary-600" href="{}">{}</a>', url, obj.dst)


#: The buttons of an episode's page: (name, label, style), the service each calls in ``act``.
BUTTONS = {
    "unpack": ("Unpack", "primary"),
    "pack_warm": ("Pack to warm", ""),
    "pack_cold": ("Pack to cold", ""),
    "pin": ("Pin", ""),
    "unpin": ("Unpin", ""),
    "forget": ("Forget", "danger"),
    "restore": ("Restore", "primary"),
}


def buttons_for(episode: Episode) -> list[str]:
    """The actions that make sense for the episode now."""
    if episode.state == State.FORGOTTEN:
        return ["restore"]
    moves = ["pack_warm", "pack_cold"] if episode.layer == Layer.HOT else ["unpack"]
    if episode.layer == Layer.WARM:
        moves.append("pack_cold")
    return [*moves, "unpin" if episode.anchor else "pin", "forget"]


#: The folded group of an episode's page where its text is corrected by hand (journaled).
EDITS: dict[str, str] = {
    "title": "Title",
    "kind": "Kind",
    "summary": "Summary (warm)",
    "key_points": "Key points (warm)",
    "headline": "Headline (cold)",
    "keywords": "Keywords (cold)",
    "tags": "Tags",
    "entities": "Names",
    "decisions": "Decisions",
    "metadata": "Metadata",
}
assert set(EDITS) == EDITABLE_FIELDS, "journal.EDITABLE_FIELDS changed: name the new field here"


class EpisodeEditForm(forms.ModelForm):
    """The fields a hand may correct (``journal.EDITABLE_FIELDS``), in an operator's words."""

    class Meta:
        model = Episode
        fields = sorted(EDITS)
        labels = EDITS
        help_texts = dict.fromkeys(EDITS, "")


@admin.register(Episode)
class EpisodeAdmin(TenantScopedAdmin):
    """An episode's page is what it is, whose, what it holds and how it is used, read-only, with
    buttons that move it through the same services as the API, journaled (``transitions`` for
    layers), so each can be rolled back from the journal; its text can be corrected in a folded
    group, through ``services.episode_edit`` (journaled too). Nothing deletes an episode here:
    forgetting is a button, and the purge after the grace period the only way out."""

    list_display = (
        "memory",
        "tenant",
        "user",
        "layer",
        "state",
        "pinned",
        "turn_count",
        "activity_score",
        "priority",
        "last_occurred_at",
    )
    list_display_links = ("memory",)
    list_filter = ("tenant", "layer", "state", "kind", "anchor", "needs_reindex")
    list_select_related = ("tenant", "tenant__policy")
    search_fields = ("=public_id", "title", "search_text", "session_id", "user_id")
    date_hierarchy = "last_occurred_at"
    fieldsets = (
        (
            None,
            {"fields": ("public_id", "tenant", "owner", "kind_shown", "layer", "state", "pinned")},
        ),
        ("What it holds", {"fields": ("holds", "entities_shown", "decisions_shown", "tags_shown")}),
        (
            "Use and scores",
            {
                "fields": (
                    "turn_count",
                    "access_count",
                    "last_accessed_at",
                    "activity_score",
                    "retrievability",
                    "priority",
                )
            },
        ),
        (
            "Times",
            {
                "fields": (
                    "first_occurred_at",
                    "last_occurred_at",
                    "created_at",
                    "restored_shown",
                    "forgotten_at",
                )
            },
        ),
        ("Correct its text (journaled)", {"classes": ["collapse"], "fields": tuple(sorted(EDITS))}),
    )
    form = EpisodeEditForm
    readonly_fields = (
        "public_id",
        "tenant",
        "owner",
        "kind_shown",
        "layer",
        "state",
        "pinned",
        "holds",
        "entities_shown",
        "decisions_shown",
        "tags_shown",
        "turn_count",
        "access_count",
        "last_accessed_at",
        "activity_score",
        "retrievability",
        "priority",
        "first_occurred_at",
        "last_occurred_at",
        "created_at",
        "restored_shown",
        "forgotten_at",
    )
    inlines = [TurnInline, OutLinkInline]
    actions = ["unpack", "pack_warm", "pack_cold", "pin", "unpin", "forget", "restore"]
    list_per_page = 50
    change_form_template = "admin/episodes/episode/change_form.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # memories come in through the API

    def has_change_permission(self, request: HttpRequest, obj: Episode | None = None) -> bool:
        if obj is not None and obj.state == State.FORGOTTEN:
            return False  # restore it first (a button)
        return super().has_change_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Episode, form: forms.ModelForm, change: bool) -> None:
        """Only what the operator changed, through the journaled service (never ``obj.save()``)."""
        if form.changed_data:
            services.episode_edit(
                tenant=obj.tenant,
                episode_id=obj.pk,
                changes={name: form.cleaned_data[name] for name in form.changed_data},
                now=timezone.now(),
                actor=admin_actor(request),
            )

    def has_delete_permission(self, request: HttpRequest, obj: Episode | None = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        act = self.admin_site.admin_view(require_POST(self.act))
        return [
            path("<path:object_id>/act/<str:action>/", act, name="episodes_episode_act"),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        episode = self.get_object(request, object_id)
        buttons: list[dict[str, str]] = []
        if episode is not None and super().has_change_permission(request):
            buttons = [
                {"name": name, "label": BUTTONS[name][0], "style": BUTTONS[name][1]}
                for name in buttons_for(episode)
            ]
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), "buttons": buttons}
        )

    def act(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        """One button of an episode's page, for an episode of a tenant the user operates."""
        episode = self.get_object(request, object_id)
        if episode is None or action not in BUTTONS:
            raise Http404
        if not super().has_change_permission(request):
            raise PermissionDenied
        getattr(self, action)(request, self.get_queryset(request).filter(pk=episode.pk))
        return HttpResponseRedirect(reverse("admin:episodes_episode_change", args=[episode.pk]))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Episode]:
        return (
            super()
            .get_queryset(request)
            .annotate(in_degree=_degree("dst", "src"), out_degree=_degree("src", "dst"))
        )

    # --- what the page and the list show -------------------------------------------------------
    @admin.display(description="memory", ordering="public_id")
    def memory(self, obj: Episode) -> str:
        return f"{obj.public_id} {obj.title}".strip()[:90]

    @admin.display(description="user", ordering="user_id")
    def user(self, obj: Episode) -> str:
        return obj.user_id or "—"

    @admin.display(description="whose")
    def owner(self, obj: Episode) -> str:
        return f"user {obj.user_id or '—'} · agent {obj.agent_id or '—'} · session {obj.session_id or '—'}"

    @admin.display(description="kind")
    def kind_shown(self, obj: Episode) -> str:
        return obj.kind or "—"

    @admin.display(description="pinned", boolean=True)
    def pinned(self, obj: Episode) -> bool:
        return bool(obj.anchor)

    @admin.display(description="packed text")
    def holds(self, obj: Episode) -> str:
        parts = [obj.headline, obj.summary, *(f"· {point}" for point in obj.key_points or [])]
        text = "\n".join(part for part in parts if part)
        if text:
            return text
        return "none: a hot memory holds its turns, whole (below)" if obj.layer == Layer.HOT else "—"

    @admin.display(description="entities")
    def entities_shown(self, obj: Episode) -> str:
        return ", ".join(map(str, obj.entities or [])) or "—"

    @admin.display(description="decisions")
    def decisions_shown(self, obj: Episode) -> str:
        return "; ".join(map(str, obj.decisions or [])) or "—"

    @admin.display(description="tags")
    def tags_shown(self, obj: Episode) -> str:
        return ", ".join([*map(str, obj.tags or []), *map(str, obj.keywords or [])]) or "—"

    @admin.display(description="last unpacked")
    def restored_shown(self, obj: Episode) -> Any:
        return obj.restored_at or "—"

    # --- computed scores: at `now` under the tenant's policy, never stored ---------------------
    def _policy(self, obj: Episode) -> Policy:
        # The page's rows come with their tenant's policy row (list_select_related).
        return obj.tenant.policy.values()

    def _stats(self, obj: Episode) -> scoring.EpisodeStats:
        degree = (getattr(obj, "in_degree", 0), getattr(obj, "out_degree", 0))
        return scoring.EpisodeStats.from_episode(obj, *degree)

    @admin.display(description="activity")
    def activity_score(self, obj: Episode) -> str:
        return f"{scoring.activity_score(self._stats(obj), self._policy(obj), timezone.now()):.2f}"

    @admin.display(description="recall probability (FSRS)")
    def retrievability(self, obj: Episode) -> str:
        return f"{scoring.retrievability(self._stats(obj), self._policy(obj), timezone.now()):.2f}"

    @admin.display(description="priority")
    def priority(self, obj: Episode) -> str:
        return f"{scoring.priority(self._stats(obj), self._policy(obj), timezone.now()):.2f}"

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
                self.message_user(request, f"{episode.public_id}: {exc}", messages.WARNING)
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
