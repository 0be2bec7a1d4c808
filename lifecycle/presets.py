"""Presets: the field values that set one consistent group of rules on a tenant's
policy (docs/concepts.md#presets-and-layer-rules)."""

from __future__ import annotations

from typing import Any

from django.db.models import Field

from .models import LayerRule, MemoryPolicy, Preset

#: The fields whose rules each preset sets: applying it puts them back to their defaults (written
#: once, on the policy's fields) ...
# fmt: off
_FIELDS: dict[str, tuple[str, ...]] = {
    Preset.METABOLISM: (
        "layer_rule", "coef_in", "coef_out", "coef_access", "coef_traverse", "coef_recent_access",
        "coef_recent_link", "coef_age", "t_access_hours", "t_link_hours", "t_age_days", "theta_active",
        "theta_delete", "hot_days", "cold_days", "hot_cap_per_session",
    ),
    Preset.ADR: (
        "adr_initial_weight", "adr_decay_factor", "adr_min_weight", "adr_archive_after_days",
        "adr_archive_weight", "adr_archive_significance", "activation_limit", "hot_cap_per_session",
    ),
    Preset.LSM: (
        "priority_recency_weight", "priority_frequency_weight", "priority_anchor_weight",
        "priority_relevance_weight", "priority_hot_above", "priority_cold_at_or_below", "hot_days",
        "cold_days",
    ),
    Preset.FSRS: (
        "fsrs_parameters", "desired_retention", "retrievability_hot_above",
        "retrievability_cold_at_or_below", "forget_below_retrievability",
    ),
}
#: ... and then sets what the preset changes: its layer rule, and for FSRS the fusion it was
#: described with (the defaults rank better: docs/decisions/0026).
_CHANGES: dict[str, dict[str, Any]] = {
    Preset.METABOLISM: {},
    Preset.ADR: {"layer_rule": LayerRule.WEIGHT},
    Preset.LSM: {"layer_rule": LayerRule.PRIORITY},
    Preset.FSRS: {
        "layer_rule": LayerRule.RETRIEVABILITY, "rrf_vector_weight": 0.7, "rrf_text_weight": 0.3, "rrf_k": 60,
    },
}
# fmt: on


def _default(name: str) -> Any:
    field = MemoryPolicy._meta.get_field(name)
    assert isinstance(field, Field), name
    return field.get_default()


#: Preset -> the values it writes on a policy.
PRESETS: dict[str, dict[str, Any]] = {
    name: {**{field: _default(field) for field in fields}, **_CHANGES[name]}
    for name, fields in _FIELDS.items()
}


def apply_preset(policy: MemoryPolicy, name: str) -> MemoryPolicy:
    """Set the fields of one preset (not saved: the caller validates and saves)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    for field, value in PRESETS[name].items():
        setattr(policy, field, list(value) if isinstance(value, list) else value)
    policy.preset = name
    return policy
