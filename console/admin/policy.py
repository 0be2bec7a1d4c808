"""The memory policy in the console: the form by group of rules, presets, the preview of a tick under
the values on the form, and the record of every saved change."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.views.decorators.http import require_POST

from lifecycle import services
from lifecycle.models import MemoryPolicy, PolicyChange, Preset
from lifecycle.policy import policy_diff
from lifecycle.presets import PRESETS, apply_preset
from memory_platform.admin_base import TenantScopedAdmin, admin_actor

FIELDSETS: tuple[tuple[str | None, dict[str, Any]], ...] = (
    (None, {"fields": ("tenant", "preset", "apply_preset_now", "layer_rule")}),
    (
        "Activity score",
        {
            "fields": (
                ("coef_in", "coef_out", "coef_access", "coef_traverse"),
                ("coef_recent_access", "coef_recent_link", "coef_age"),
                ("t_access_hours", "t_link_hours", "t_age_days"),
            )
        },
    ),
    (
        "Layers & hot quota",
        {
            "fields": (
                ("hot_days", "cold_days", "promote_after_accesses"),
                ("hot_cap_per_session", "hot_quota"),
                ("hot_quota_bytes", "hot_pinned_share"),
                ("warm_points_max", "warm_points_min"),
                ("priority_recency_weight", "priority_frequency_weight"),
                ("priority_anchor_weight", "priority_relevance_weight"),
                ("priority_recency_days", "priority_frequency_cap"),
                ("priority_hot_above", "priority_cold_at_or_below"),
            )
        },
    ),
    ("Retrieval", {"fields": (("rrf_vector_weight", "rrf_text_weight", "rrf_k"),)}),
    (
        "FSRS-6",
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
        "ADR",
        {
            "fields": (
                ("adr_initial_weight", "adr_decay_factor", "adr_min_weight"),
                ("adr_archive_after_days", "adr_archive_weight", "adr_archive_significance"),
                "activation_limit",
            )
        },
    ),
    (
        "Candidates & forgetting",
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
        help_text="Overwrite the fields the chosen preset governs with its values on save; "
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
        services.policy_save(policy=obj, now=timezone.now(), actor=admin_actor(request))

    def preview_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """What a tick now would do with the values in the form, saving nothing (``tick_preview``)."""
        saved = get_object_or_404(self.get_queryset(request).select_related("tenant"), pk=object_id)
        if not self.has_change_permission(request, saved):
            raise PermissionDenied
        edited = MemoryPolicy.objects.for_tenant(saved.tenant_id).select_related("tenant").get(pk=saved.pk)
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
                    tenant=saved.tenant, now=timezone.now(), policy=unsaved.values()
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
                    policy=policy, now=timezone.now(), actor=f"{admin_actor(request)} (preset {name})"
                )
            except ValidationError as exc:
                # a preset can clash with a hand-set value (e.g. hot_days past cold_days)
                self.message_user(request, f"{policy.tenant}: not applied: {exc.messages}", messages.ERROR)
                continue
            done += 1
        self.message_user(request, f"applied preset {name!r} to {done} polic(ies)", messages.SUCCESS)

    @admin.action(description="Apply preset: metabolism (activity score)")
    def apply_metabolism(self, request: HttpRequest, queryset: QuerySet[MemoryPolicy]) -> None:
        self._apply(request, queryset, Preset.METABOLISM)

    @admin.action(description="Apply preset: ADR (decaying weight)")
    def apply_adr(self, request: HttpRequest, queryset: QuerySet[MemoryPolicy]) -> None:
        self._apply(request, queryset, Preset.ADR)

    @admin.action(description="Apply preset: LSM (priority)")
    def apply_lsm(self, request: HttpRequest, queryset: QuerySet[MemoryPolicy]) -> None:
        self._apply(request, queryset, Preset.LSM)

    @admin.action(description="Apply preset: FSRS-6 (retrievability)")
    def apply_fsrs(self, request: HttpRequest, queryset: QuerySet[MemoryPolicy]) -> None:
        self._apply(request, queryset, Preset.FSRS)
