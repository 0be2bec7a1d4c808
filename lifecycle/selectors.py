"""Reads of the tenant's policy for the layers to the left (ingest reads its segmentation rules
through the ``MEMORY["SEGMENTATION_RULES"]`` hook, so episodes never imports lifecycle)."""

from __future__ import annotations

from episodes.segmentation import SegmentationRules
from memory_platform.tenancy.models import Tenant

from .models import policy_for


def segmentation_rules(tenant: Tenant) -> SegmentationRules:
    policy = policy_for(tenant)
    return SegmentationRules(
        gap_seconds=int(policy.episode_gap_seconds),
        split_similarity=float(policy.episode_split_similarity),
        max_turns=int(policy.episode_max_turns),
    )
