"""A frozen search request instead of twenty parameters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

ALL_LAYERS = ("hot", "warm", "cold")


@dataclass(frozen=True)
class SearchQuery:
    text: str = ""
    vector: np.ndarray | None = None
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    kinds: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    occurred_from: datetime | None = None
    occurred_to: datetime | None = None
    layers: tuple[str, ...] = ALL_LAYERS
    limit: int = 10
    depth: str = "shallow"
    include_dormant: bool = False
    explain: bool = False
    record_access: bool = True
