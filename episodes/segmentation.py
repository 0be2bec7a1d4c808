"""Which turns belong together: the rules that open a new episode (docs/concepts.md#segmentation)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np


@dataclass(frozen=True)
class SegmentationRules:
    """A tenant's rules, from its policy (``lifecycle.selectors.segmentation_rules``)."""

    gap_seconds: int
    split_similarity: float
    max_turns: int
    #: Similarity is only judged once an episode has this many turns (a centroid of one or two
    #: turns is too noisy to split on).
    min_turns_for_similarity: int = 3


@dataclass
class OpenEpisode:
    """The running state of the episode a session's next turn may join."""

    turn_count: int
    last_occurred_at: datetime
    centroid_sum: np.ndarray | None


def starts_new_episode(
    open_episode: OpenEpisode | None,
    *,
    occurred_at: datetime,
    vector: np.ndarray | None,
    boundary: bool,
    rules: SegmentationRules,
) -> bool:
    if open_episode is None or boundary:
        return True
    if open_episode.turn_count >= rules.max_turns:
        return True
    if (occurred_at - open_episode.last_occurred_at).total_seconds() > rules.gap_seconds:
        return True
    if (
        vector is not None
        and open_episode.centroid_sum is not None
        and open_episode.turn_count >= rules.min_turns_for_similarity
    ):
        centroid = open_episode.centroid_sum
        norm = float(np.linalg.norm(centroid))
        if norm > 0 and float(np.dot(vector, centroid) / norm) < rules.split_similarity:
            return True
    return False
