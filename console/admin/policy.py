"""The memory policy in the console: the form by group of rules, presets, the preview of a tick under
the values on the form, and the record of every saved change."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.views.decorators.http import require_POST

from episodes.models import Episode, Layer, State
from lifecycle import scoring, services
from lifecycle.models import MemoryPolicy, PolicyChange, Preset
from lifecycle.policy_rows import policy_diff
from lifecycle.presets import PRESETS, apply_preset
from lifecycle.tenant_policy import Policy
from memory_platform.admin_base import TenantScopedAdmin, admin_actor
from memory_platform.tenancy.models import Tenant

#: The page: the preset and a few plainly named settings open; every other rule folded by topic.
FIELDSETS: tuple[tuple[str | None, dict[str, Any]], ...] = (
    (
        "Preset",
        {
            "fields": ("tenant", ("preset", "apply_preset_now"), "layer_rule"),
            "description": "A preset sets one consistent group of rules; the settings below adjust it.",
        },
    ),
    (
        "Main settings",
        {
            "fields": (
                ("hot_days", "cold_days"),
                ("hot_quota_bytes", "hot_quota"),
                ("purge_grace_days", "tick_interval_minutes"),
                "summariser",
            )
        },
    ),
    (
        "Activity score (the metabolism preset)",
        {
            "classes": ["collapse"],
            "fields": (
                ("coef_in", "coef_out", "coef_access", "coef_traverse"),
                ("coef_recent_access", "coef_recent_link", "coef_age"),
                ("t_access_hours", "t_link_hours", "t_age_days"),
                ("theta_active", "theta_delete"),
            ),
        },
    ),
    (
        "Hot layer limits and warm shape",
        {
            "classes": ["collapse"],
            "fields": (
                ("hot_cap_per_session", "hot_pinned_share", "promote_after_accesses"),
                ("warm_points_max", "warm_points_min", "warm_target_ratio"),
            ),
        },
    ),
    (
        "Priority (the LSM preset)",
        {
            "classes": ["collapse"],
            "fields": (
                ("priority_recency_weight", "priority_frequency_weight"),
                ("priority_anchor_weight", "priority_relevance_weight"),
                ("priority_recency_days", "priority_frequency_cap"),
                ("priority_hot_above", "priority_cold_at_or_below"),
            ),
        },
    ),
    (
        "Recall probability (the FSRS-6 preset)",
        {
            "classes": ["collapse"],
            "fields": (
                "fsrs_parameters",
                "desired_retention",
                ("retrievability_hot_above", "retrievability_cold_at_or_below"),
                "forget_below_retrievability",
            ),
        },
    ),
    (
        "Decaying weight (the ADR preset)",
        {
            "classes": ["collapse"],
            "fields": (
                ("adr_initial_weight", "adr_decay_factor", "adr_min_weight"),
                ("adr_archive_after_days", "adr_archive_weight", "adr_archive_significance"),
                "activation_limit",
            ),
        },
    ),
    (
        "Merge and delete proposals",
        {
            "classes": ["collapse"],
            "fields": (("delete_after_days",), ("merge_similarity", "merge_max_links")),
        },
    ),
    (
        "Search ranking",
        {"classes": ["collapse"], "fields": (("rrf_vector_weight", "rrf_text_weight", "rrf_k"),)},
    ),
    (
        "Splitting conversations into episodes",
        {
            "classes": ["collapse"],
            "fields": (("episode_gap_seconds", "episode_split_similarity", "episode_max_turns"),),
        },
    ),
    (
        "LLM summariser",
        {
            "classes": ["collapse"],
            "fields": (("llm_base_url", "llm_model"), ("llm_api_key", "llm_timeout_seconds")),
        },
    ),
)

#: Each setting in an operator's words: (label, help text). The model's help texts stay the
#: reference of the API's schema; these say what a value does to the tenant's memories.
WORDS: dict[str, tuple[str, str]] = {
    "preset": ("Preset", "The group of rules the policy was last set from."),
    "layer_rule": (
        "Layer rule",
        "What decides when a memory leaves hot: time since it was last used (activity), its decaying "
        "weight (ADR), a priority score (LSM) or its recall probability (FSRS-6).",
    ),
    "hot_days": (
        "Days in hot",
        "A memory unused this many days is packed to warm (its summary and key points).",
    ),
    "cold_days": (
        "Days until cold",
        "A memory unused this many days is packed to cold (a headline and tags).",
    ),
    "hot_quota_bytes": (
        "Hot size limit (bytes)",
        "What the tenant's hot memories may weigh (text and vectors); past it, the least recently used go to warm.",
    ),
    "hot_quota": ("Hot memories at most", "Past this many hot memories, the least active go to warm."),
    "purge_grace_days": (
        "Days to undo a forget",
        "A forgotten memory can be restored this long; then the tick removes it for good.",
    ),
    "tick_interval_minutes": ("Tick every (minutes)", "How often the lifecycle runs for this tenant."),
    "summariser": (
        "Summariser",
        "How memories are packed: offline extraction, or an LLM you configure below.",
    ),
    "coef_in": ("Links in", "Weight of the links pointing at a memory."),
    "coef_out": ("Links out", "Weight of the links from a memory."),
    "coef_access": ("Times found", "Weight of how often search returned it."),
    "coef_traverse": ("Times reached", "Weight of how often a link led to it."),
    "coef_recent_access": ("Recently found", "Weight of how recently search returned it."),
    "coef_recent_link": ("Recently reached", "Weight of how recently a link led to it."),
    "coef_age": ("Age penalty", "Points a memory loses per age period (below)."),
    "t_access_hours": ("Recently found fades over (hours)", ""),
    "t_link_hours": ("Recently reached fades over (hours)", ""),
    "t_age_days": ("Age period (days)", "The age that costs the age penalty once."),
    "theta_active": ("Active from", "A memory scoring at least this is active; below it, dormant."),
    "theta_delete": (
        "Propose deleting at or below",
        "A memory scoring this low may be proposed for deletion.",
    ),
    "hot_cap_per_session": (
        "Hot memories per session",
        "Past it, the least active of the session go to warm.",
    ),
    "hot_pinned_share": (
        "Share of the hot limit for pinned memories",
        "A pin that would pass it is refused; the rest of the limit stays for unpinned memories.",
    ),
    "promote_after_accesses": (
        "Back to hot after (uses)",
        "A packed memory found this often within the days in hot comes back.",
    ),
    "warm_points_max": ("Key points kept (newly warm)", ""),
    "warm_points_min": ("Key points kept (nearly cold)", ""),
    "warm_target_ratio": ("Warm size (share of the original)", "Names and decisions are always kept."),
    "priority_recency_weight": ("Recency weight", ""),
    "priority_frequency_weight": ("Frequency weight", ""),
    "priority_anchor_weight": ("Pinned bonus", ""),
    "priority_relevance_weight": ("Relevance weight", ""),
    "priority_recency_days": ("Recency fades over (days)", ""),
    "priority_frequency_cap": ("Uses for full frequency", ""),
    "priority_hot_above": ("Hot above", "Priority above this keeps a memory hot."),
    "priority_cold_at_or_below": ("Cold at or below", "Priority this low sends a memory to cold."),
    "fsrs_parameters": ("FSRS-6 model weights", "21 numbers; leave the defaults unless you fitted your own."),
    "desired_retention": ("Desired retention", "Between 0 and 1."),
    "retrievability_hot_above": ("Hot above", "Recall probability above this keeps a memory hot."),
    "retrievability_cold_at_or_below": (
        "Cold at or below",
        "Recall probability this low sends a memory to cold.",
    ),
    "forget_below_retrievability": (
        "Forget below (API default)",
        "The threshold of a forget by recall probability.",
    ),
    "adr_initial_weight": ("Starting weight", ""),
    "adr_decay_factor": ("Daily decay", "The weight is multiplied by this each day."),
    "adr_min_weight": ("Lowest weight", ""),
    "adr_archive_after_days": (
        "Archive after (days)",
        "Older memories go to warm when also light and unimportant.",
    ),
    "adr_archive_weight": ("Archive below weight", ""),
    "adr_archive_significance": ("Archive below significance", ""),
    "activation_limit": ("Memories per kind (activation)", ""),
    "delete_after_days": ("Propose deleting after (days unused)", ""),
    "merge_similarity": (
        "Merge from similarity",
        "Two memories at least this similar may be proposed for a merge.",
    ),
    "merge_max_links": ("Merge only with at most (links)", ""),
    "rrf_vector_weight": ("Meaning (vector) weight", "How much ranking by meaning counts."),
    "rrf_text_weight": ("Words (full text) weight", "How much ranking by shared words counts."),
    "rrf_k": ("Rank smoothing", "Smaller: the first ranks of each list count more."),
    "episode_gap_seconds": ("New episode after a pause of (seconds)", ""),
    "episode_split_similarity": (
        "New episode below similarity",
        "A turn this unlike its episode starts a new one.",
    ),
    "episode_max_turns": ("Turns per episode at most", ""),
    "llm_base_url": ("LLM server URL", "OpenAI-compatible, e.g. http://llm:8000/v1."),
    "llm_model": ("LLM model", ""),
    "llm_api_key": ("LLM API key", "Sent as a Bearer token; never shown in lists."),
    "llm_timeout_seconds": ("LLM timeout (seconds)", "After it, packing falls back to extraction."),
}


def why_nothing_moves(tenant: Tenant, policy: Policy, now: datetime) -> list[str]:
    """Why a tick under ``policy`` would move nothing, in the terms of its layer rule: the memories
    closest to leaving their layer, and how far they are from it (``scoring``, the rules' home)."""
    live = list(
        Episode.objects.for_tenant(tenant)
        .exclude(state=State.FORGOTTEN)
        .only(
            *(f.name for f in Episode._meta.concrete_fields if f.name not in {"embedding", "search_vector"})
        )
    )
    if not live:
        return ["The tenant holds no memory yet."]
    pinned = sum(1 for e in live if e.anchor)
    movable = [e for e in live if not e.anchor]
    reasons = []
    if pinned:
        reasons.append(f"{pinned} pinned memor{'y never moves' if pinned == 1 else 'ies never move'} down.")
    by_layer = {layer: [e for e in movable if e.layer == layer] for layer in (Layer.HOT, Layer.WARM)}
    if policy.layer_rule == "retrievability":
        for layer, bound, name in (
            (Layer.HOT, policy.retrievability_hot_above, "hot"),
            (Layer.WARM, policy.retrievability_cold_at_or_below, "cold"),
        ):
            if by_layer[layer]:
                lowest = min(
                    scoring.retrievability(scoring.EpisodeStats.from_episode(e, 0, 0), policy, now)
                    for e in by_layer[layer]
                )
                reasons.append(
                    f"The lowest recall probability among {layer} memories is {lowest:.2f}; "
                    f"they move {'down' if layer == Layer.HOT else 'to cold'} at or below {bound:.2f}"
                    + (" (hot above it)." if name == "hot" else ".")
                )
    else:
        for layer, days in ((Layer.HOT, policy.hot_days), (Layer.WARM, policy.cold_days)):
            if by_layer[layer]:
                idle = max(
                    (now - scoring.EpisodeStats.from_episode(e, 0, 0).last_touched_at).total_seconds() / 86400
                    for e in by_layer[layer]
                )
                where = "warm" if layer == Layer.HOT else "cold"
                reasons.append(
                    f"The longest unused {layer} memory was last used {idle:.1f} days ago; "
                    f"memories go {where} after {days:g} day{'' if days == 1 else 's'} unused."
                )
        if policy.layer_rule != "activity":
            reasons.append(
                f"The {policy.layer_rule} rule also keeps memories up while their scores are high."
            )
    hot_bytes = sum(e.hot_bytes or 0 for e in live if e.layer == Layer.HOT)
    reasons.append(
        f"Hot holds {filesizeformat(hot_bytes)} of the {filesizeformat(policy.hot_quota_bytes)} it may."
    )
    return reasons


class MemoryPolicyForm(forms.ModelForm):
    apply_preset_now = forms.BooleanField(
        required=False,
        label="Apply the preset's values",
        help_text="On save, set the rules of the chosen preset to its values; other settings keep what is entered here.",
    )
    llm_api_key = forms.CharField(required=False, widget=forms.PasswordInput(render_value=True))

    class Meta:
        model = MemoryPolicy
        fields = [
            name
            for _, options in FIELDSETS
            for entry in options["fields"]
            for name in (entry if isinstance(entry, tuple) else (entry,))
            if name != "apply_preset_now"
        ]
        labels = {name: label for name, (label, _) in WORDS.items()}
        help_texts = {name: help_text for name, (_, help_text) in WORDS.items()}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, (label, help_text) in WORDS.items():
            if name in self.fields:  # the declared ones too (the key's password box)
                self.fields[name].label, self.fields[name].help_text = label, help_text

    def clean(self) -> dict[str, Any]:
        # Runs before the model's clean(), so the preset's values are validated with the rest.
        cleaned = super().clean() or self.cleaned_data
        if cleaned.get("apply_preset_now") and cleaned.get("preset") in PRESETS:
            cleaned.update(PRESETS[cleaned["preset"]])
        return cleaned


@admin.register(MemoryPolicy)
class MemoryPolicyAdmin(TenantScopedAdmin):
    form = MemoryPolicyForm
    # One setting a line: each keeps its label, box and help text side by side.
    fieldsets = tuple(  # type: ignore[assignment]  # the stubs' _FieldOpts TypedDict is private
        (
            name,
            {
                **options,
                "fields": [
                    f
                    for entry in options["fields"]
                    for f in (entry if isinstance(entry, tuple) else (entry,))
                ],
            },
        )
        for name, options in FIELDSETS
    )
    list_display = ("tenant", "preset", "layer_rule", "summariser", "hot_days", "cold_days", "updated_at")
    list_filter = ("preset", "layer_rule", "summariser")
    list_select_related = ("tenant",)
    search_fields = ("tenant__name",)
    autocomplete_fields = ("tenant",)
    actions = [f"apply_{name}" for name in Preset.values]

    change_form_template = "admin/lifecycle/memorypolicy/change_form.html"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("tenant",) if obj is not None else ()

    # One policy per tenant, made with the tenant and gone with it: none is added or deleted here.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

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
        saved = PolicyChange.objects.filter(tenant_id=policy.tenant_id)[:50] if policy is not None else []
        changes = [
            (
                change,
                [(WORDS.get(name, (name, ""))[0], old, new) for name, (old, new) in change.changes.items()],
            )
            for change in saved
        ]
        return super().change_view(
            request,
            object_id,
            form_url,
            {
                **(extra_context or {}),
                "policy_changes": changes,
                "show_save_and_add_another": False,
                "show_delete": False,
            },
        )

    def save_model(self, request: HttpRequest, obj: MemoryPolicy, form: Any, change: bool) -> None:
        services.policy_save(policy=obj, now=timezone.now(), actor=admin_actor(request))

    def preview_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """What a tick now would do with the values in the form, saving nothing (``tick_preview``):
        the panel beside the form when htmx asks (as the form changes), else a page."""
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
            context["changes"] = [
                (WORDS.get(name, (name, ""))[0], name, values)
                for name, values in policy_diff(saved, unsaved).items()
            ]
            now = timezone.now()
            try:
                preview = services.tick_preview(tenant=saved.tenant, now=now, policy=unsaved.values())
            except services.TickBusy as exc:
                context["busy"] = str(exc)
            else:
                context["preview"] = preview
                if not preview["counts"]:
                    context["still"] = why_nothing_moves(saved.tenant, unsaved.values(), now)
        panel = request.headers.get("HX-Request") == "true"
        template = "panel" if panel else "preview"
        return TemplateResponse(request, f"admin/lifecycle/memorypolicy/{template}.html", context)

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
