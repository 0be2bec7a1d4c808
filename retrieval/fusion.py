"""Weighted Reciprocal Rank Fusion (docs/concepts.md#fusion): pure, no I/O.

score(d) = sum over lists L of weight_L / (k + rank_L(d)), ranks starting at 1. A document absent
from a list gets nothing from it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass
class Fused:
    key: Hashable
    score: float
    ranks: dict[str, int] = field(default_factory=dict)
    contributions: dict[str, float] = field(default_factory=dict)


def weighted_rrf(
    rankings: Mapping[str, Sequence[Hashable]], weights: Mapping[str, float], k: int = 60
) -> list[Fused]:
    """Fuse ranked lists of keys; the result is sorted by score, ties broken by best single rank."""
    if k < 0:
        raise ValueError("k must be non-negative")
    fused: dict[Hashable, Fused] = {}
    for name, keys in rankings.items():
        weight = float(weights.get(name, 0.0))
        for rank, key in enumerate(keys, start=1):
            item = fused.get(key)
            if item is None:
                item = fused[key] = Fused(key, 0.0, {}, {})
            elif name in item.ranks:
                continue  # a list ranks a key once, at its best position
            contribution = weight / (k + rank)
            item.score += contribution
            item.ranks[name] = rank
            item.contributions[name] = contribution
    return sorted(fused.values(), key=lambda f: (-f.score, min(f.ranks.values())))
