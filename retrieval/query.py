"""A frozen search request instead of twenty parameters."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from episodes.models import State
from episodes.scope import Scope

#: What a search sees unless told otherwise: every episode that is not forgotten, in every layer
#: and state (docs/concepts.md#search-across-tiers). The state moves a hit's rank
#: (``ranking.STATE_WEIGHTS``); it does not hide it.
#: (A scope without states is that: the hot index then needs no state filter, since a forgotten
#: episode's documents leave it, and the rows read for the hits leave forgotten ones out anyway.)
DEFAULT_SCOPE = Scope()
#: ``include_dormant: false``: active episodes only.
ACTIVE_ONLY = (State.ACTIVE,)


@dataclass(frozen=True)
class SearchQuery:
    text: str = ""
    vector: np.ndarray | None = None
    scope: Scope = DEFAULT_SCOPE
    limit: int = 10
    depth: str = "shallow"
    #: How each hit shows (``episodes.shapes``): ``compact`` (its text, for an agent to read) or
    #: ``full`` (its layer's shape, every field).
    view: str = "compact"
    explain: bool = False
    record_access: bool = True
    #: Hits whose best cosine similarity to the query is below this are not returned (``None``:
    #: no threshold). The similarity is the highest between the query's embedding and any turn of
    #: the hit's episode, whatever its layer: it means the same for every query.
    min_score: float | None = None
    #: Follow one hop from the best candidates (shared rare entities, links; ``retrieval.hops``);
    #: ``None``: as the platform does (``MEMORY["SEARCH_HOPS"]``).
    hops: bool | None = None
    #: Rank by the full-text lists alone (no query vector): how `evaluate` measures the analysers.
    text_only: bool = False
