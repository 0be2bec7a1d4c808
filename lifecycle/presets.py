"""Presets: the field values that set one consistent group of rules on a tenant's
policy (docs/concepts.md#presets-and-layer-rules)."""

from __future__ import annotations

from typing import Any

from fsrs.scheduler import DEFAULT_PARAMETERS

from .models import LayerRule, MemoryPolicy, Preset

# Each preset sets the fields its seed has rules for and leaves the others as they are.
# fmt: off
PRESETS: dict[str, dict[str, Any]] = {
    Preset.METABOLISM: {
        "layer_rule": LayerRule.ACTIVITY,
        "coef_in": 1.0, "coef_out": 0.8, "coef_access": 1.2, "coef_traverse": 0.8,
        "coef_recent_access": 1.5, "coef_recent_link": 1.0, "coef_age": 0.3,
        "t_access_hours": 24.0, "t_link_hours": 72.0, "t_age_days": 30.0,
        "theta_active": -1.0, "theta_delete": -3.0,
        "hot_days": 14, "cold_days": 90, "hot_cap_per_session": 50,
    },
    Preset.ADR: {
        "layer_rule": LayerRule.WEIGHT,
        "adr_initial_weight": 1.0, "adr_decay_factor": 0.99, "adr_min_weight": 0.0,
        "adr_archive_after_days": 1.0, "adr_archive_weight": 0.3, "adr_archive_significance": 0.5,
        "activation_limit": 3, "hot_cap_per_session": 50,
    },
    Preset.LSM: {
        "layer_rule": LayerRule.PRIORITY,
        "priority_recency_weight": 0.3, "priority_frequency_weight": 0.2,
        "priority_anchor_weight": 0.3, "priority_relevance_weight": 0.2,
        "priority_hot_above": 0.7, "priority_cold_at_or_below": 0.3,
        "hot_days": 14, "cold_days": 90,
    },
    Preset.FSRS: {
        "layer_rule": LayerRule.RETRIEVABILITY,
        "fsrs_parameters": list(DEFAULT_PARAMETERS), "desired_retention": 0.9,
        "retrievability_hot_above": 0.8, "retrievability_cold_at_or_below": 0.6,
        "forget_below_retrievability": 0.3,
        "rrf_vector_weight": 0.7, "rrf_text_weight": 0.3, "rrf_k": 60,
    },
}
# fmt: on


def apply_preset(policy: MemoryPolicy, name: str) -> MemoryPolicy:
    """Set the fields of one preset (not saved: the caller validates and saves)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    for field, value in PRESETS[name].items():
        setattr(policy, field, list(value) if isinstance(value, list) else value)
    policy.preset = name
    return policy
