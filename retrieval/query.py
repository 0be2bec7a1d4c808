"""A frozen search request instead of twenty parameters."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from episodes.models import State
from episodes.scope import Scope

#: What a search sees unless told otherwise: active episodes, in every layer.
DEFAULT_SCOPE = Scope(states=(State.ACTIVE,))
#: ``include_dormant``: dormant episodes too.
WITH_DORMANT = (State.ACTIVE, State.DORMANT)


@dataclass(frozen=True)
class SearchQuery:
    text: str = ""
    vector: np.ndarray | None = None
    scope: Scope = DEFAULT_SCOPE
    limit: int = 10
    depth: str = "shallow"
    explain: bool = False
    record_access: bool = True
