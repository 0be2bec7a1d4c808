from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.views.decorators.http import require_POST

from episodes import curation
from episodes import services as episode_services
from episodes.admin import TurnInline
from episodes.models import Episode, Layer, Link, State
from memory_platform.admin_base import ReadOnlyAdmin, TenantScopedAdmin

from . import scoring, services
from .candidates import CandidateError, candidate_approve, candidate_reject
from .forgetting import forget_journaled
from .models import Candidate, JournalEntry, MemoryPolicy, PolicyChange, Preset, TickRun
from .policy import policy_diff
from .presets import PRESETS, apply_preset
from .rollback import IRREVERSIBLE, RollbackError, rollback_journal_entry, rollback_plan

FIELDSETS: tuple[tuple[str | None, dict[str, Any]], ...] = (
    (None, {"fields": ("tenant", "preset", "apply_preset_now", "layer_rule")}),
    (
        "Activity score — seed 002",
        {
            "fields": (
                ("coef_in", "coef_out", "coef_access", "coef_traverse"),
                ("coef_recent_access", "coef_recent_link", "coef_age"),
                ("t_access_hours", "t_link_hours", "t_age_days"),
            )
        },
    ),
    (
        "Layers & LRU — seeds 000/001/003",
        {
            "fields": (
                ("hot_days", "cold_days", "promote_after_accesses"),
                ("hot_cap_per_session", "hot_quota"),
                ("warm_points_max", "warm_points_min"),
                ("priority_recency_weight", "priority_frequency_weight"),
                ("priority_anchor_weight", "priority_relevance_weight"),
                ("priority_recency_days", "priority_frequency_cap"),
                ("priority_hot_above", "priority_cold_at_or_below"),
            )
        },
    ),
    ("Retrieval — seed 004", {"fields": (("rrf_vector_weight", "rrf_text_weight", "rrf_k"),)}),
    (
        "FSRS-6 — seed 004",
        {
            "fields": (
                "fsrs_parameters",
                "desired_retention",
                ("retrievability_hot_above", "retrievability_cold_at_or_below"),
                "forget_below_retrievability",
            )
        },
    ),
    (
        "ADR — seed 000",
        {
            "fields": (
                ("adr_initial_weight", "adr_decay_factor", "adr_min_weight"),
                ("adr_archive_after_days", "adr_archive_weight", "adr_archive_significance"),
                "activation_limit",
            )
        },
    ),
    (
        "Candidates & forgetting — seed 002",
        {
            "fields": (
                ("theta_active", "theta_delete"),
                ("delete_after_days", "purge_grace_days"),
                ("merge_similarity", "merge_max_links"),
                "tick_interval_minutes",
            )
        },
    ),
    ("Segmentation", {"fields": (("episode_gap_seconds", "episode_split_similarity", "episode_max_turns"),)}),
    (
        "Summariser",
        {
            "fields": (
                ("summariser", "warm_target_ratio"),
                ("llm_base_url", "llm_model"),
                ("llm_api_key", "llm_timeout_seconds"),
            )
        },
    ),
)


class MemoryPolicyForm(forms.ModelForm):
    apply_preset_now = forms.BooleanField(
        required=False,
        label="Apply the preset's values",
        help_text="Overwrite the fields the chosen preset governs with its seed's values on save; "
        "other fields keep what is entered here.",
    )
    llm_api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=True),
        help_text="sent as a Bearer token; never shown in lists",
    )

    class Meta:
        model = MemoryPolicy
        fields = [
            name
            for _, options in FIELDSETS
            for entry in options["fields"]
            for name in (entry if isinstance(entry, tuple) else (entry,))
            if name != "apply_preset_now"
        ]

    def clean(self) -> dict[str, Any]:
        # Runs before the model's clean(), so the preset's values are validated with the rest.
        cleaned = super().clean() or self.cleaned_data
        if cleaned.get("apply_preset_now") and cleaned.get("preset") in PRESETS:
            cleaned.update(PRESETS[cleaned["preset"]])
        return cleaned


@admin.register(MemoryPolicy)
class MemoryPolicyAdmin(TenantScopedAdmin):
    form = MemoryPolicyForm
    fieldsets = FIELDSETS  # type: ignore[assignment]  # the stubs' _FieldOpts TypedDict is private
    list_display = ("tenant", "preset", "layer_rule", "summariser", "hot_days", "cold_days", "updated_at")
    list_filter = ("preset", "layer_rule", "summariser")
    list_select_related = ("tenant",)
    search_fields = ("tenant__name",)
    autocomplete_fields = ("tenant",)
    actions = [f"apply_{name}" for name in Preset.values]

    change_form_template = "admin/lifecycle/memorypolicy/change_form.html"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("tenant",) if obj is not None else ()

    def get_urls(self) -> list[URLPattern]:
        preview = self.admin_site.admin_view(require_POST(self.preview_view))
        return [
            path("<path:object_id>/preview/", preview, name="lifecycle_memorypolicy_preview"),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        policy = self.get_object(request, object_id)
        changes = PolicyChange.objects.filter(tenant_id=policy.tenant_id)[:50] if policy is not None else []
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), "policy_changes": changes}
        )

    def save_model(self, request: HttpRequest, obj: MemoryPolicy, form: Any, change: bool) -> None:
        services.policy_save(policy=obj, now=timezone.now(), actor=_actor(request))

    def preview_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """What a tick now would do with the values in the form, saving nothing (``tick_preview``)."""
        saved = get_object_or_404(self.get_queryset(request).select_related("tenant"), pk=object_id)
        if not self.has_change_permission(request, saved):
            raise PermissionDenied
        edited = MemoryPolicy.objects.select_related("tenant").get(pk=saved.pk)
        form = self.get_form(request, edited)(request.POST, instance=edited)
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "title": f"Preview: {saved}",
            "policy": saved,
            "opts": self.model._meta,
            "errors": form.errors if not form.is_valid() else None,
        }
        if context["errors"] is None:
            unsaved = form.save(commit=False)
            context["changes"] = policy_diff(saved, unsaved)
            try:
                context["preview"] = services.tick_preview(
                    tenant=saved.tenant, now=timezone.now(), policy=unsaved
                )
            except services.TickBusy as exc:
                context["busy"] = str(exc)
        return TemplateResponse(request, "admin/lifecycle/memorypolicy/preview.html", context)

    def _apply(self, request: HttpRequest, queryset: QuerySet[MemoryPolicy], name: str) -> None:
        done = 0
        for policy in queryset.select_related("tenant"):
            apply_preset(policy, name)
            try:
                services.policy_save(
                    policy=policy, now=timezone.now(), actor=f"{_actor(request)} (preset {name})"
                )
            except ValidationError as exc:
                # a preset can clash with a hand-set value (e.g. hot_days past cold_days)
                self.message_user(request, f"{policy.tenant}: not applied: {exc.messages}", messages.ERROR)
                continue
            done += 1
        self.message_user(request, f"applied preset {name!r} to {done} polic(ies)", messages.SUCCESS)

    @admin.action(description="Apply preset: metabolism (seed 002)")
    def apply_metabolism(self, request: HttpRequest, queryset: QuerySet[MemoryPolicy]) -> None:
        self._apply(request, queryset, Preset.METABOLISM)

    @admin.action(description="Apply preset: ADR (seed 000)")
    def apply_adr(self, request: HttpRequest, queryset: QuerySet[MemoryPolicy]) -> None:
        self._apply(request, queryset, Preset.ADR)

    @admin.action(description="Apply preset: LSM (seed 003)")
    def apply_lsm(self, request: HttpRequest, queryset: QuerySet[MemoryPolicy]) -> None:
        self._apply(request, queryset, Preset.LSM)

    @admin.action(description="Apply preset: FSRS-6 (seed 004)")
    def apply_fsrs(self, request: HttpRequest, queryset: QuerySet[MemoryPolicy]) -> None:
        self._apply(request, queryset, Preset.FSRS)


@admin.register(TickRun)
class TickRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "status", "started_at", "now_used", "duration_ms", "counts")
    list_filter = ("status", "tenant")
    list_select_related = ("tenant",)
    date_hierarchy = "started_at"


def _actor(request: HttpRequest) -> str:
    return f"admin:{request.user.get_username()}"


def _review_text(episode: Episode) -> str:
    """An episode as a reviewer reads it: id, layer, title and the start of its text as stored
    (no extra statement per row: the list selects the episodes with the candidates)."""
    text = episode.headline or episode.summary or episode.search_text
    return f"{episode.public_id} [{episode.layer}] {episode.title}: {' '.join(text.split())[:240]}"


def _rollback_problem(entry: JournalEntry) -> str:
    """Why ``entry`` cannot be rolled back, or "" (the service checks again when it runs)."""
    if entry.rolled_back_at is not None:
        return "already rolled back"
    if entry.action in IRREVERSIBLE:
        return f"a {entry.action!r} cannot be rolled back"
    if entry.episode_id is None:
        return "its episode no longer exists (purged)"
    return ""


@admin.register(JournalEntry)
class JournalEntryAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "tenant",
        "created_at",
        "action",
        "actor",
        "episode_id_value",
        "tick_run",
        "rolled_back_at",
    )
    list_filter = ("action", "tenant")
    list_select_related = ("tenant", "tick_run")
    search_fields = ("episode_id_value", "action")
    date_hierarchy = "created_at"
    actions = ["roll_back"]

    def has_rollback_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("lifecycle.change_journalentry"))

    @admin.action(
        description="Roll back (and the later entries of the same episode)", permissions=["rollback"]
    )
    def roll_back(self, request: HttpRequest, queryset: QuerySet[JournalEntry]) -> HttpResponse | None:
        if request.POST.get("confirmed") != "yes":
            # First a page saying what will change; the rollback happens when it is confirmed.
            plans = [
                {"entry": entry, "undone": rollback_plan(entry), "problem": _rollback_problem(entry)}
                for entry in queryset.select_related("tenant", "episode").order_by("-pk")
            ]
            context = {
                **self.admin_site.each_context(request),
                "title": "Roll back journal entries?",
                "opts": self.model._meta,
                "plans": plans,
                "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                "action": "roll_back",
            }
            return TemplateResponse(
                request, "admin/lifecycle/journalentry/rollback_confirmation.html", context
            )
        now = timezone.now()
        done = 0
        # Newest first, so an entry already undone by a later one's cascade is simply reported.
        for entry in queryset.order_by("-pk"):
            entry.refresh_from_db(fields=["rolled_back_at"])
            if entry.rolled_back_at is not None:
                continue
            try:
                done += len(rollback_journal_entry(entry, now=now, actor=_actor(request)))
            except RollbackError as exc:
                self.message_user(request, f"entry {entry.pk}: {exc}", messages.WARNING)
        self.message_user(request, f"rolled back {done} journal entr(ies)", messages.SUCCESS)
        return None


@admin.register(Candidate)
class CandidateAdmin(ReadOnlyAdmin):
    """The review queue: a merge proposal shows both texts side by side with their similarity, a
    delete proposal its text and why (its activity score fell below the policy's threshold)."""

    list_display = (
        "id",
        "tenant",
        "kind",
        "episode_text",
        "other_text",
        "similarity",
        "score",
        "status",
        "created_at",
        "decided_by",
    )
    list_filter = ("kind", "status", "tenant")
    list_select_related = ("tenant", "episode", "other")
    raw_id_fields = ("episode", "other")
    date_hierarchy = "created_at"
    actions = ["approve", "reject"]

    def has_decide_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("lifecycle.change_candidate"))

    @admin.display(description="episode (merged away, or deleted)")
    def episode_text(self, obj: Candidate) -> str:
        return _review_text(obj.episode)

    @admin.display(description="survives (merge)")
    def other_text(self, obj: Candidate) -> str:
        return (
            _review_text(obj.other) if obj.other is not None else f"— delete: activity score {obj.score:.3f}"
        )

    def _decide(self, request: HttpRequest, queryset: QuerySet[Candidate], decide: Any, label: str) -> None:
        now = timezone.now()
        done = 0
        for candidate in queryset.order_by("pk"):
            try:
                decide(candidate=candidate, now=now, actor=_actor(request))
                done += 1
            except CandidateError as exc:
                self.message_user(request, f"candidate {candidate.pk}: {exc}", messages.WARNING)
        self.message_user(request, f"{label} {done} candidate(s)", messages.SUCCESS)

    @admin.action(
        description="Approve (soft: forget, or link merged_into and forget; journaled)",
        permissions=["decide"],
    )
    def approve(self, request: HttpRequest, queryset: QuerySet[Candidate]) -> None:
        self._decide(request, queryset, candidate_approve, "approved")

    @admin.action(description="Reject", permissions=["decide"])
    def reject(self, request: HttpRequest, queryset: QuerySet[Candidate]) -> None:
        self._decide(request, queryset, candidate_reject, "rejected")


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
        actor = _actor(request)
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
