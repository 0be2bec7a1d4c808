"""The lifecycle's writes, in one place for callers (views, admin, tasks, the read path).

The work lives in modules of its own: ``tick`` (DESIGN §4 steps 1-9), ``candidates`` (merge and
delete proposals and their decisions), ``forgetting`` (soft forget, ForgetByThreshold, purge),
``rollback`` (undo from the journal) and ``hotsync`` (Redis following Postgres).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from episodes.models import Episode
from memory_platform.tenancy.models import Tenant

from . import scoring
from .candidates import CandidateError, candidate_approve, candidate_reject
from .forgetting import ForgetFilters, forget_apply, forget_journaled, forget_select, purge_forgotten
from .models import policy_for
from .rollback import RollbackError, rollback_journal_entry
from .tick import STEPS, TickInterrupted, tick_run

__all__ = [
    "STEPS",
    "CandidateError",
    "ForgetFilters",
    "RollbackError",
    "TickInterrupted",
    "candidate_approve",
    "candidate_reject",
    "feedback_review",
    "forget_apply",
    "forget_journaled",
    "forget_select",
    "purge_forgotten",
    "rollback_journal_entry",
    "tick_run",
]


def feedback_review(*, tenant: Tenant, used: Sequence[int], unused: Sequence[int], now: datetime) -> int:
    """FSRS-6 reviews from an agent's feedback (seed 004): `Good` for a memory it used, `Hard` for
    one it was given and did not use. Returns the number of episodes reviewed."""
    policy = policy_for(tenant)
    ratings = {episode_id: "unused" for episode_id in unused}
    ratings.update({episode_id: "access" for episode_id in used})  # used wins if named twice
    reviewed = 0
    with transaction.atomic():
        # Row locks: stability and difficulty are read, reviewed and written back (no lost update).
        rows = (
            Episode.objects.visible().filter(tenant=tenant).select_for_update().filter(pk__in=list(ratings))
        )
        for episode in rows.order_by("pk"):
            stats = scoring.EpisodeStats.from_episode(episode)
            stability, difficulty = scoring.review(stats, policy, ratings[episode.pk], now)
            Episode.objects.filter(pk=episode.pk).update(
                stability=stability, difficulty=difficulty, last_review_at=now
            )
            reviewed += 1
    return reviewed
