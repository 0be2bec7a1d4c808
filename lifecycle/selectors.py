"""Reads of the tenant's policy for the layers below: ingest's segmentation rules (passed to
``episodes.services.turns_ingest`` as data)."""

from __future__ import annotations

from episodes.segmentation import SegmentationRules

from .tenant_policy import Policy


def segmentation_rules(policy: Policy) -> SegmentationRules:
    return SegmentationRules(
        gap_seconds=int(policy.episode_gap_seconds),
        split_similarity=float(policy.episode_split_similarity),
        max_turns=int(policy.episode_max_turns),
    )
