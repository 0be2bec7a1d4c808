"""A tenant's policy as the code reads it: an immutable, typed value (docs/concepts.md#scores).

The policy is stored as a ``MemoryPolicy`` row (``lifecycle.policy``), where each field has its one
default, its help text and its invariants. Everything that *reads* the policy — ingest, search,
the tick, the scores, the console's preview — receives this value instead: read from one
statement by ``lifecycle.policy_rows.read_policy`` (or taken from an unsaved row by
``MemoryPolicy.values()``), once per request or task, and passed down. It cannot be changed by
accident on the way; a change is made on the row and saved through ``lifecycle.services.policy_save``.

The fields are the row's columns (a test holds the two lists equal). Nothing here imports Django:
the pure modules (``scoring``, ``compression``, ``retrieval.ranking``) take it as it is.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    preset: str
    layer_rule: str

    # activity score (docs/concepts.md#activity-score)
    coef_in: float
    coef_out: float
    coef_access: float
    coef_traverse: float
    coef_recent_access: float
    coef_recent_link: float
    coef_age: float
    t_access_hours: float
    t_link_hours: float
    t_age_days: float

    # states and candidates (docs/concepts.md#states)
    theta_active: float
    theta_delete: float
    delete_after_days: int
    merge_similarity: float
    merge_max_links: int
    purge_grace_days: int

    # layers, hot quota and priority (docs/concepts.md#presets-and-layer-rules)
    hot_days: int
    cold_days: int
    hot_cap_per_session: int
    hot_quota: int
    hot_quota_bytes: int
    hot_pinned_share: float
    warm_points_max: int
    warm_points_min: int
    promote_after_accesses: int
    priority_recency_weight: float
    priority_frequency_weight: float
    priority_anchor_weight: float
    priority_relevance_weight: float
    priority_recency_days: float
    priority_frequency_cap: int
    priority_hot_above: float
    priority_cold_at_or_below: float

    # languages and search
    language: str
    rrf_vector_weight: float
    rrf_text_weight: float
    rrf_k: int

    # FSRS-6 (docs/concepts.md#fsrs-retrievability-and-stability)
    fsrs_parameters: tuple[float, ...]
    desired_retention: float
    retrievability_hot_above: float
    retrievability_cold_at_or_below: float
    forget_below_retrievability: float

    # ADR (docs/concepts.md#adr-weight)
    adr_initial_weight: float
    adr_decay_factor: float
    adr_min_weight: float
    adr_archive_after_days: float
    adr_archive_weight: float
    adr_archive_significance: float

    # reads, the tick, ingest and compression
    activation_limit: int
    tick_interval_minutes: int
    episode_gap_seconds: int
    episode_split_similarity: float
    episode_max_turns: int
    summariser: str
    warm_target_ratio: float
    search_packed_turns: bool
    llm_base_url: str
    llm_model: str
    llm_api_key: str
    llm_timeout_seconds: float

    def __post_init__(self) -> None:
        # A list read from the row becomes a tuple: the value stays immutable all the way down.
        object.__setattr__(self, "fsrs_parameters", tuple(self.fsrs_parameters))

    @property
    def pinned_cap_bytes(self) -> int:
        """What the tenant's pinned episodes may weigh: ``hot_pinned_share`` of ``hot_quota_bytes``."""
        return pinned_cap_bytes(self.hot_pinned_share, self.hot_quota_bytes)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return _field_names()


@functools.cache
def _field_names() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(Policy))


def pinned_cap_bytes(hot_pinned_share: float, hot_quota_bytes: int) -> int:
    """The pinned cap of a policy, saved or being edited (docs/decisions/0038)."""
    return int(hot_pinned_share * hot_quota_bytes)
