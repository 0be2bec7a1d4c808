"""Reads of the tenant's policy for the callers of the layers below and above: ingest's
segmentation rules (passed to ``episodes.services.turns_ingest`` as data), the read path's settings."""

from __future__ import annotations

import functools
from typing import NamedTuple

from django.db import connection

from episodes.segmentation import SegmentationRules
from memory_platform import db
from memory_platform.tenancy.models import Tenant

from .models import MemoryPolicy, policy_for


def segmentation_rules(policy: MemoryPolicy) -> SegmentationRules:
    return SegmentationRules(
        gap_seconds=int(policy.episode_gap_seconds),
        split_similarity=float(policy.episode_split_similarity),
        max_turns=int(policy.episode_max_turns),
    )


class SearchSettings(NamedTuple):
    """What the read path needs of the policy: fusion, activation, and the priority's terms (a policy to
    ``scoring.priority``)."""

    rrf_vector_weight: float
    rrf_text_weight: float
    rrf_k: int
    search_packed_turns: bool
    activation_limit: int
    priority_recency_weight: float
    priority_frequency_weight: float
    priority_anchor_weight: float
    priority_relevance_weight: float
    priority_recency_days: float
    priority_frequency_cap: int


@functools.cache
def _search_settings_query() -> str:
    columns = db.column_list(MemoryPolicy._meta.get_field(name) for name in SearchSettings._fields)
    return (
        f"SELECT {columns} FROM {connection.ops.quote_name(MemoryPolicy._meta.db_table)} WHERE tenant_id = %s"
    )


def search_settings(tenant: Tenant) -> SearchSettings:
    """The columns of the tenant's policy every search reads, not the whole policy (building the
    policy object costs more than the statement); the policy is created with its defaults on
    first use."""
    row = db.fetch_one(_search_settings_query(), [tenant.pk])
    if row is None:
        policy = policy_for(tenant)
        row = tuple(getattr(policy, name) for name in SearchSettings._fields)
    return SearchSettings(*row)
