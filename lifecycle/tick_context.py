"""What one tick carries from step to step: the tenant, its policy, `now`, the run record, the
counts and errors, the fault hook; and the two operations every move shares: reading an episode
again at the version a decision was made on, and the optimistic write (docs/concepts.md#halt-on-touch)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

from episodes.models import Episode, State
from memory_platform.tenancy.models import Tenant

from . import transitions
from .compression import get_summariser
from .listing import Listing
from .models import TickRun
from .tenant_policy import Policy

logger = logging.getLogger(__name__)

#: An episode a step changes without packing it (a state, a proposal) is read without its content
#: columns; a move reads its episode whole, again, at the version it decided on.
LISTING_DEFERRED = (
    "embedding",
    "search_text",
    "summary",
    "entities",
    "decisions",
    "headline",
    "keywords",
    "metadata",
)


class TickInterrupted(Exception):
    """Raised by fault injection: the tick stops here, as if the process had died."""


FaultHook = Callable[[str], None]


def days_between(now: datetime, then: datetime | None) -> float:
    return max(0.0, (now - then).total_seconds() / 86_400) if then is not None else 0.0


class TickError(TypedDict):
    """A step that failed for an episode (the tick goes on with the next)."""

    step: str
    episode: int | None
    error: str


@dataclass
class Tick:
    tenant: Tenant
    policy: Policy
    now: datetime
    run: TickRun
    hook: FaultHook | None = None
    counts: Counter[str] = field(default_factory=Counter)
    errors: list[TickError] = field(default_factory=list)
    _listing: Listing | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.summariser = get_summariser(self.policy)
        self.move = transitions.Move(now=self.now, actor="tick", tick_run=self.run, checkpoint=self.hook)

    # --- bookkeeping ---------------------------------------------------------------------------
    def checkpoint(self, label: str) -> None:
        if self.hook is not None:
            self.hook(label)

    def error(self, step: str, episode_id: int | None, exc: BaseException) -> None:
        logger.warning("tick %s: %s failed for episode %s: %s", self.run.pk, step, episode_id, exc)
        self.errors.append(
            {"step": step, "episode": episode_id, "error": f"{type(exc).__name__}: {exc}"[:500]}
        )

    def journal(self, episode: Episode, action: str, before: dict[str, Any], after: dict[str, Any]) -> None:
        transitions.journal(self.move, episode, action, before, after)

    # --- reading -------------------------------------------------------------------------------
    def listing(self) -> Listing:
        """The tenant's visible episodes, read and scored once per tick (``lifecycle.listing``).
        Scores are computed here, every tick, and never stored: a score always reflects the
        current counters and policy (docs/concepts.md#scores)."""
        if self._listing is None:
            self._listing = Listing.read(self.tenant, self.policy, self.now)
        return self._listing

    def moved(self, episode: Episode) -> None:
        """A step wrote ``episode``: the listing follows."""
        if self._listing is not None:
            self._listing.moved(episode)

    def instances(self, episode_ids: list[int]) -> dict[int, Episode]:
        """The episodes a step is about to change, without their content columns."""
        found: dict[int, Episode] = {}
        for start in range(0, len(episode_ids), 1000):
            chunk = episode_ids[start : start + 1000]
            for episode in Episode.objects.filter(tenant=self.tenant, pk__in=chunk).defer(*LISTING_DEFERRED):
                episode.tenant = self.tenant  # journal entries name it
                found[episode.pk] = episode
        return found

    def fresh(self, episode_id: int, version: int) -> Episode | None:
        """The whole row, if it is still the version the decision was made on. If not, the listing
        takes the row as it is now."""
        episode = Episode.objects.filter(tenant=self.tenant, pk=episode_id).select_related("tenant").first()
        if episode is None or episode.version != version or episode.state == State.FORGOTTEN:
            self.counts["abandoned"] += 1
            if self._listing is not None:
                self._listing.refresh(episode, episode_id, self.policy, self.now)
            return None
        return episode

    def write(self, episode: Episode, expected_layer: str, **fields: Any) -> bool:
        """A change that keeps the layer, only if nobody touched the episode since it was read."""
        written = transitions.write_if_unchanged(episode, expected_layer, **fields)
        if written:
            self.moved(episode)
        else:
            self.counts["abandoned"] += 1
        return written
