"""A tenant's memory policy (docs/concepts.md#scores). Registered with the app through
``lifecycle.models``.

Every tunable of the scores, layers, search and compression is a field with its default. Invariants live twice
on purpose: ``clean()`` explains a bad value to an operator, the check constraints stop a bad value that
arrives any other way (a shell, a bulk update, a migration).
"""

from __future__ import annotations

import functools
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, Q, Sum
from django.db.models.lookups import Exact, LessThanOrEqual
from fsrs.scheduler import DEFAULT_PARAMETERS, Scheduler

from episodes.language import Language
from episodes.models import Episode, State
from memory_platform.conf import memory_settings
from memory_platform.openai_compat import validate_base_url
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.scoping import TenantOwned, TenantScopedManager

from .tenant_policy import Policy, pinned_cap_bytes

#: A policy's language: "auto" or one of a turn's (``episodes.language.Language``).
POLICY_LANGUAGES = [("auto", "read off each turn's script"), *Language.choices]


def setting_default(name: str) -> Any:
    """A policy starts from the platform's ``MEMORY`` setting when there is one (memory_platform.conf)."""
    return getattr(memory_settings, name)


def default_fsrs_parameters() -> list[float]:
    return list(DEFAULT_PARAMETERS)


def _setting(name: str) -> functools.partial:
    return functools.partial(setting_default, name)


def _f(default: Any, help_text: str) -> models.FloatField:
    return models.FloatField(default=default, help_text=help_text)


def _n(default: Any, help_text: str) -> models.PositiveIntegerField:
    return models.PositiveIntegerField(default=default, help_text=help_text)


# Field groups for the invariants below (each checked by clean() and by a check constraint).
# fmt: off
NONNEG_FIELDS = (
    "coef_in", "coef_out", "coef_access", "coef_traverse", "coef_recent_access", "coef_recent_link",
    "coef_age", "adr_archive_after_days",
)
POSITIVE_FIELDS = (
    "t_access_hours", "t_link_hours", "t_age_days", "priority_recency_days", "llm_timeout_seconds",
    "tick_interval_minutes", "episode_gap_seconds", "episode_max_turns", "rrf_k", "warm_points_min",
    "priority_frequency_cap", "adr_decay_factor", "adr_initial_weight", "warm_target_ratio",
)
#: The smallest value of a positive float field: time constants divide ages, and a denormal one
#: (5e-324) makes scores infinite.
POSITIVE_FLOAT_MIN = 1e-6
PRIORITY_WEIGHTS = (
    "priority_recency_weight", "priority_frequency_weight", "priority_anchor_weight",
    "priority_relevance_weight",
)
UNIT_FIELDS = PRIORITY_WEIGHTS + (
    "priority_hot_above", "priority_cold_at_or_below", "retrievability_hot_above",
    "retrievability_cold_at_or_below", "forget_below_retrievability", "rrf_vector_weight",
    "rrf_text_weight", "merge_similarity", "episode_split_similarity", "adr_decay_factor",
    "adr_initial_weight", "adr_min_weight", "adr_archive_weight", "adr_archive_significance",
    "warm_target_ratio", "hot_pinned_share",
)
# fmt: on
#: Periods in days, at most ``MAX_DAYS`` (a century): the tick subtracts them from `now`, and
#: ten million days would take a date out of range.
DAY_FIELDS = ("hot_days", "cold_days", "delete_after_days", "purge_grace_days")
MAX_DAYS = 36_500
STRICTLY_ORDERED_FIELDS = (
    ("theta_delete", "theta_active"),
    ("hot_days", "cold_days"),
    ("priority_cold_at_or_below", "priority_hot_above"),
    ("retrievability_cold_at_or_below", "retrievability_hot_above"),
)


class Preset(models.TextChoices):
    METABOLISM = "metabolism", "metabolism: activity score, states, layers by time since access"
    ADR = "adr", "ADR: decaying weight and archive rule"
    LSM = "lsm", "LSM: priority thresholds"
    FSRS = "fsrs", "FSRS-6: retrievability thresholds"


class LayerRule(models.TextChoices):
    ACTIVITY = "activity", "time since access, eviction by activity score"
    WEIGHT = "weight", "ADR archive rule: age, weight, significance"
    PRIORITY = "priority", "priority thresholds"
    RETRIEVABILITY = "retrievability", "FSRS-6 retrievability thresholds"


class SummariserName(models.TextChoices):
    EXTRACTIVE = "extractive", "extractive (offline, deterministic)"
    LLM = "llm", "LLM (OpenAI-compatible chat endpoint, falls back to extractive)"


class MemoryPolicy(TenantOwned):
    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="policy")
    preset = models.CharField(
        max_length=12,
        choices=Preset.choices,
        default=Preset.METABOLISM,
        help_text="The preset whose values the policy was last set from; any field may be overridden after.",
    )
    layer_rule = models.CharField(
        max_length=16,
        choices=LayerRule.choices,
        default=LayerRule.ACTIVITY,
        help_text="Which rule decides an episode's layer (docs/concepts.md#presets-and-layer-rules).",
    )

    # activity score (docs/concepts.md#activity-score)
    coef_in = _f(1.0, "activity score A: weight of ln(1+in_degree), the links pointing at the episode")
    coef_out = _f(0.8, "activity score B: weight of ln(1+out_degree), the links from the episode")
    coef_access = _f(1.2, "activity score C: weight of ln(1+access_count), how often it was returned")
    coef_traverse = _f(
        0.8, "activity score D: weight of ln(1+traverse_count), how often it was reached through a link"
    )
    coef_recent_access = _f(
        1.5, "activity score E: weight of exp(-Δaccess/T_access), how recently it was returned"
    )
    coef_recent_link = _f(
        1.0, "activity score F: weight of exp(-Δlink/T_link), how recently a link led to it"
    )
    coef_age = _f(0.3, "activity score G: points lost per T_age of age")
    t_access_hours = _f(24.0, "activity score T_access (hours): time constant of the recent-access term")
    t_link_hours = _f(72.0, "activity score T_link (hours): time constant of the recent-link term")
    t_age_days = _f(30.0, "activity score T_age (days): age that costs G points")

    # states and candidates (docs/concepts.md#states)
    # With the default coefficients an unused episode with one `continues` link scores about
    # 0.7 - 0.3 * age/30d: -1.0 keeps it active for about half a year unused, -3.0 proposes its
    # deletion after about a year (never automatic).
    theta_active = _f(
        -1.0, "θ_active: activity score at or above which an episode is active (below it: dormant)"
    )
    theta_delete = _f(
        -3.0, "θ_delete: activity score at or below which an episode may be proposed for deletion"
    )
    delete_after_days = _n(180, "an episode is proposed for deletion only if also unaccessed this many days")
    merge_similarity = _f(0.92, "merge proposals: two episodes whose embeddings' cosine is at or above this")
    merge_max_links = _n(2, "merge proposals: only episodes with at most this many links (in + out)")
    purge_grace_days = _n(
        _setting("PURGE_GRACE_DAYS"),
        "days a forgotten episode can be restored before the tick removes it for good",
    )

    # layers and hot quota (docs/concepts.md#presets-and-layer-rules)
    hot_days = _n(14, "an episode not accessed this many days leaves hot (time-based layer rules)")
    cold_days = _n(90, "an episode not accessed this many days goes cold")
    hot_cap_per_session = _n(
        50, "at most this many hot episodes per session; the lowest activity score leaves first"
    )
    hot_quota = _n(
        10_000, "at most this many hot episodes per tenant; the lowest activity score leaves first"
    )
    hot_quota_bytes = models.PositiveBigIntegerField(
        default=_setting("HOT_QUOTA_BYTES"),
        help_text="at most this many bytes of turn text and vectors hot per tenant; over it, "
        "ingest sends the least recently used hot episodes to warm before indexing new ones",
    )
    hot_pinned_share = _f(
        0.25,
        "the share of hot_quota_bytes a tenant's pinned episodes (anchors, in any layer) may weigh; a pin "
        "past it is refused, and the rest of the quota stays for the working set "
        "(docs/decisions/0038-pinned-memories-within-the-hot-quota.md)",
    )
    warm_points_max = _n(
        8, "key points a warm episode keeps when it has been idle hot_days (fewer as it idles longer)"
    )
    warm_points_min = _n(3, "key points a warm episode keeps when it has been idle cold_days")
    promote_after_accesses = _n(3, "accesses within hot_days that bring a warm or cold episode back to hot")
    priority_recency_weight = _f(0.3, "priority: maximum of the recency term")
    priority_frequency_weight = _f(0.2, "priority: maximum of the frequency term")
    priority_anchor_weight = _f(0.3, "priority: what being pinned (an anchor) adds")
    priority_relevance_weight = _f(0.2, "priority: maximum of the query relevance term")
    priority_recency_days = _f(14.0, "priority: recency decays as exp(-days since access / this)")
    priority_frequency_cap = _n(20, "priority: access count at which the frequency term is full")
    priority_hot_above = _f(0.7, "priority layer rule: priority above this is hot")
    priority_cold_at_or_below = _f(0.3, "priority layer rule: priority at or below this is cold")

    # languages (episodes.language)
    language = models.CharField(
        max_length=4,
        choices=POLICY_LANGUAGES,
        default="auto",
        help_text="The language of turns and memories that do not name theirs: 'auto' reads it off the "
        "text (Chinese characters, Cyrillic or Latin letters); a language here is taken as it is.",
    )

    # retrieval (docs/concepts.md#fusion)
    rrf_vector_weight = _f(_setting("RRF_VECTOR_WEIGHT"), "search fusion: weight of the vector ranking")
    rrf_text_weight = _f(_setting("RRF_TEXT_WEIGHT"), "search fusion: weight of the full-text (BM25) ranking")
    rrf_k = models.PositiveIntegerField(
        default=_setting("RRF_K"),
        help_text="search fusion: the constant k of reciprocal rank fusion (smaller: the first ranks count more)",
    )

    # FSRS-6 (docs/concepts.md#fsrs-retrievability-and-stability)
    fsrs_parameters = models.JSONField(
        default=default_fsrs_parameters,
        help_text="FSRS-6: the 21 model weights (default: the fsrs package's defaults)",
    )
    desired_retention = _f(0.9, "FSRS-6: desired retention, strictly between 0 and 1")
    retrievability_hot_above = _f(0.8, "retrievability layer rule: retrievability above this is hot")
    retrievability_cold_at_or_below = _f(
        0.6, "retrievability layer rule: retrievability at or below this is cold"
    )
    forget_below_retrievability = _f(0.3, "POST /forget by retrievability: the default threshold")

    # ADR (docs/concepts.md#adr-weight)
    adr_initial_weight = _f(1.0, "ADR: weight w0 of a new episode")
    adr_decay_factor = _f(0.99, "ADR: the weight decays as w = w0 · decay_factor ** age_days")
    adr_min_weight = _f(0.0, "ADR: the weight never falls below this")
    adr_archive_after_days = _f(1.0, "ADR archive rule: age (days) above which an episode is archived (warm)")
    adr_archive_weight = _f(0.3, "ADR archive rule: weight below which an episode is archived (warm)")
    adr_archive_significance = _f(0.5, "ADR archive rule: priority below which an episode is archived (warm)")
    activation_limit = _n(
        _setting("ACTIVATION_LIMIT"), "activation: how many memories of one kind it returns"
    )

    # operations and segmentation (docs/concepts.md#the-tick, docs/concepts.md#segmentation)
    tick_interval_minutes = _n(
        60, "how often the lifecycle tick runs for this tenant (1 h keeps layers fresh)"
    )
    episode_gap_seconds = _n(
        _setting("EPISODE_GAP_SECONDS"), "segmentation: a gap this long between turns opens a new episode"
    )
    episode_split_similarity = _f(
        _setting("EPISODE_SPLIT_SIMILARITY"),
        "segmentation: a turn less similar than this to its episode opens a new one",
    )
    episode_max_turns = _n(
        _setting("EPISODE_MAX_TURNS"), "segmentation: an episode holds at most this many turns"
    )

    # summariser (docs/concepts.md#the-warm-shape)
    summariser = models.CharField(
        max_length=12,
        choices=SummariserName.choices,
        default=SummariserName.EXTRACTIVE,
        help_text="how hot episodes are packed to warm and cold",
    )
    warm_target_ratio = _f(
        0.25, "the warm shape aims at this share of the raw text (entities and decisions are always kept)"
    )
    search_packed_turns = models.BooleanField(
        default=True,
        help_text="also find warm and cold episodes through their raw turns (vectors and full text of the "
        "turns Postgres keeps whole). Off: only through the packed shape and its centroid, which is smaller "
        "and misses more of the old memories (docs/decisions/0006-packed-turns-searched.md). What is "
        "returned stays the packed shape either way.",
    )
    llm_base_url = models.CharField(
        max_length=500,
        blank=True,
        default="",
        validators=[validate_base_url],
        help_text="OpenAI-compatible base URL, e.g. http://llm:8000/v1 (POSTs to <base>/chat/completions)",
    )
    llm_model = models.CharField(max_length=200, blank=True, default="")
    llm_api_key = models.CharField(max_length=500, blank=True, default="", help_text="sent as a Bearer token")
    llm_timeout_seconds = _f(20.0, "the LLM summariser gives up (and falls back) after this long")

    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedManager()

    class Meta:
        verbose_name_plural = "memory policies"
        constraints = [
            *(
                models.CheckConstraint(condition=Q(**{f"{name}__gte": 0}), name=f"policy_{name}_nonneg")
                for name in NONNEG_FIELDS
            ),
            *(
                models.CheckConstraint(condition=Q(**{f"{name}__gt": 0}), name=f"policy_{name}_positive")
                for name in POSITIVE_FIELDS
            ),
            *(
                models.CheckConstraint(
                    condition=Q(**{f"{name}__gte": 0, f"{name}__lte": 1}), name=f"policy_{name}_unit"
                )
                for name in UNIT_FIELDS
            ),
            *(
                models.CheckConstraint(condition=Q(**{f"{name}__lte": MAX_DAYS}), name=f"policy_{name}_days")
                for name in DAY_FIELDS
            ),
            *(
                models.CheckConstraint(condition=Q(**{f"{low}__lt": F(high)}), name=f"policy_{low}_ordered")
                for low, high in STRICTLY_ORDERED_FIELDS
            ),
            models.CheckConstraint(
                condition=Q(warm_points_min__lte=F("warm_points_max")), name="policy_warm_points_ordered"
            ),
            models.CheckConstraint(
                condition=Q(desired_retention__gt=0, desired_retention__lt=1), name="policy_retention_open"
            ),
            models.CheckConstraint(
                condition=LessThanOrEqual(
                    F("priority_recency_weight")
                    + F("priority_frequency_weight")
                    + F("priority_anchor_weight")
                    + F("priority_relevance_weight"),
                    1.0,
                ),
                name="policy_priority_weights_sum",
            ),
            models.CheckConstraint(
                condition=Q(preset__in=Preset.values)
                & Q(layer_rule__in=LayerRule.values)
                & Q(summariser__in=SummariserName.values),
                name="policy_choices_known",
            ),
            # jsonb_array_length raises on a non-array, so the type is tested first inside a CASE.
            models.CheckConstraint(
                condition=models.Case(
                    models.When(
                        Exact(models.Func(F("fsrs_parameters"), function="jsonb_typeof"), "array"),
                        then=Exact(
                            models.Func(
                                F("fsrs_parameters"),
                                function="jsonb_array_length",
                                output_field=models.IntegerField(),
                            ),
                            21,
                        ),
                    ),
                    default=models.Value(False),
                    output_field=models.BooleanField(),
                ),
                name="policy_fsrs_parameters_21",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.name}'s policy ({self.preset})"

    @property
    def pinned_cap_bytes(self) -> int:
        """What the tenant's pinned episodes may weigh: ``hot_pinned_share`` of ``hot_quota_bytes``."""
        return pinned_cap_bytes(self.hot_pinned_share, self.hot_quota_bytes)

    def values(self) -> Policy:
        """This row's values as the code reads them (saved or not: the console previews an edit)."""
        return Policy(**{name: getattr(self, name) for name in Policy.field_names()})

    def clean(self) -> None:
        errors: dict[str, str] = {}
        for name in NONNEG_FIELDS:
            if getattr(self, name) < 0:
                errors[name] = f"{name} must not be negative (got {getattr(self, name)})."
        for name in POSITIVE_FIELDS:
            value = getattr(self, name)
            if value <= 0 or (isinstance(value, float) and value < POSITIVE_FLOAT_MIN):
                errors[name] = f"{name} must be at least {POSITIVE_FLOAT_MIN:g} (got {value})."
        for name in DAY_FIELDS:
            if getattr(self, name) > MAX_DAYS:
                errors[name] = f"{name} must be at most {MAX_DAYS} days (got {getattr(self, name)})."
        for name in UNIT_FIELDS:
            if not 0 <= getattr(self, name) <= 1:
                errors[name] = f"{name} must be between 0 and 1 (got {getattr(self, name)})."
        for low, high in STRICTLY_ORDERED_FIELDS:
            if low not in errors and getattr(self, low) >= getattr(self, high):
                errors[low] = (
                    f"{low} ({getattr(self, low)}) must be lower than {high} ({getattr(self, high)})."
                )
        if self.warm_points_min > self.warm_points_max:
            errors["warm_points_min"] = (
                f"warm_points_min ({self.warm_points_min}) must not exceed "
                f"warm_points_max ({self.warm_points_max})."
            )
        if not 0 < self.desired_retention < 1:
            errors["desired_retention"] = (
                f"desired_retention must be strictly between 0 and 1 (got {self.desired_retention})."
            )
        priority_sum = sum(getattr(self, name) for name in PRIORITY_WEIGHTS)
        if "priority_recency_weight" not in errors and priority_sum > 1 + 1e-9:
            errors["priority_recency_weight"] = (
                f"{' + '.join(PRIORITY_WEIGHTS)} must add up to at most 1 (they add up to {priority_sum:g})."
            )
        fsrs_error = fsrs_parameters_error(self.fsrs_parameters)
        if fsrs_error:
            errors["fsrs_parameters"] = fsrs_error
        if self.summariser == SummariserName.LLM:
            for name in ("llm_base_url", "llm_model"):
                if not getattr(self, name):
                    errors[name] = f"{name} is required when the summariser is 'llm'."
        if not errors.keys() & {"hot_pinned_share", "hot_quota_bytes"}:
            lowered = self._pinned_cap_lowered_below_pins()
            if lowered:
                errors["hot_pinned_share"] = lowered
        if errors:
            raise ValidationError(errors)

    def _pinned_cap_lowered_below_pins(self) -> str:
        """Why a change that lowers the pinned cap below what the tenant has pinned is refused, or "".

        The platform never unpins: a cap under the pins would leave the hot tier over its quota
        with nothing allowed to leave. A change that keeps or raises the cap passes even when the
        tenant is over it already (pins made before the cap existed): new pins are refused until
        it is under. See docs/decisions/0038-pinned-memories-within-the-hot-quota.md."""
        if self.tenant_id is None:
            return ""
        cap = self.pinned_cap_bytes
        saved = (
            MemoryPolicy.objects.for_tenant(self.tenant_id).filter(pk=self.pk).first() if self.pk else None
        )
        if saved is not None and cap >= saved.pinned_cap_bytes:
            return ""
        pinned = pinned_bytes(self.tenant_id)
        if pinned <= cap:
            return ""
        return (
            f"the pinned cap would be {cap} bytes (hot_pinned_share {self.hot_pinned_share:g} of "
            f"hot_quota_bytes {self.hot_quota_bytes}), below the {pinned} bytes this tenant has pinned; "
            f"unpin at least {pinned - cap} bytes first (GET /api/v1/memories?anchor=true lists the pins)"
        )


def fsrs_parameters_error(value: Any) -> str:
    """Why ``value`` is not a usable FSRS-6 parameter list, or "" (the fsrs package checks the bounds)."""
    if not isinstance(value, list) or len(value) != len(DEFAULT_PARAMETERS):
        return f"fsrs_parameters must be a list of {len(DEFAULT_PARAMETERS)} numbers."
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        return "fsrs_parameters must contain only numbers."
    try:
        Scheduler(parameters=value)
    except ValueError as exc:
        return f"fsrs_parameters: {exc}"
    return ""


def pinned_bytes(tenant_id: Any) -> int:
    """What a tenant's pinned episodes weigh in hot (``Episode.hot_bytes`` of its anchors in any
    layer, forgotten ones aside): the figure ``MemoryPolicy.pinned_cap_bytes`` bounds
    (``lifecycle.quota.pin_check``)."""
    total = (
        Episode.objects.filter(tenant_id=tenant_id, anchor=True)
        .exclude(state=State.FORGOTTEN)
        .aggregate(total=Sum("hot_bytes"))["total"]
    )
    return int(total or 0)
