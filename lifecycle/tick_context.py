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
from episodes.selectors import degrees
from memory_platform.tenancy.models import Tenant

from . import scoring, transitions
from .compression import get_summariser
from .models import TickRun
from .tenant_policy import Policy

logger = logging.getLogger(__name__)

#: A tick lists every episode of the tenant several times; the content columns stay in the table
#: (a move reads its episode whole, again, at the version it decided on).
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
    def episodes(self, **filters: Any) -> list[Episode]:
        return list(
            Episode.objects.visible()
            .filter(tenant=self.tenant)
            .filter(**filters)
            .defer(*LISTING_DEFERRED)
            .select_related("tenant")  # journal entries name it
        )

    def scored(self, episodes: list[Episode]) -> dict[int, tuple[float, scoring.EpisodeStats]]:
        """Scores are computed here, every tick, and never stored: a score always reflects the
        current counters and policy (docs/concepts.md#scores)."""
        degree = degrees(self.tenant, [e.pk for e in episodes])
        out = {}
        for e in episodes:
            stats = scoring.EpisodeStats.from_episode(e, *degree.get(e.pk, (0, 0)))
            out[e.pk] = (scoring.activity_score(stats, self.policy, self.now), stats)
        return out

    def fresh(self, episode_id: int, version: int) -> Episode | None:
        """The whole row, if it is still the version the decision was made on."""
        episode = Episode.objects.filter(tenant=self.tenant, pk=episode_id).select_related("tenant").first()
        if episode is None or episode.version != version or episode.state == State.FORGOTTEN:
            self.counts["abandoned"] += 1
            return None
        return episode

    def write(self, episode: Episode, expected_layer: str, **fields: Any) -> bool:
        """A change that keeps the layer, only if nobody touched the episode since it was read."""
        written = transitions.write_if_unchanged(episode, expected_layer, **fields)
        if not written:
            self.counts["abandoned"] += 1
        return written
