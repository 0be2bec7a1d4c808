"""Forgetting: soft and journaled first, for good only after the grace period
(docs/concepts.md#forgetting).

Every way to forget (``DELETE /memories/{id}``, ``POST /forget``, the console's action, an approved
delete or merge candidate) is ``forget_journaled``, and the way back within the grace period is
``episode_restore``, journaled too: either entry rolls back exactly. The purge is the one step
nothing undoes; it leaves a journal note and a log line.

`forget_select` decides which episodes a request names (by filter, or by threshold:
FSRS-6 retrievability below a threshold) without touching anything, so a dry run is the same
code path as the real one minus `forget_apply`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from episodes import curation
from episodes.models import Episode, State
from episodes.scope import Scope
from episodes.selectors import episodes_for
from episodes.services import EpisodeNotFound
from episodes.stores.hot import HotUnavailable, hot_store
from memory_platform.tenancy.models import Tenant

from . import scoring
from .journal import FORGET_FIELDS, journal_record
from .models import TickRun, read_policy
from .quota import pin_check, pinned_weight

logger = logging.getLogger(__name__)


def forget_select(
    *, tenant: Tenant, scope: Scope, retrievability_below: float | None, now: datetime
) -> list[int]:
    """Ids of the tenant's visible episodes in ``scope``, oldest first. Reads only."""
    qs = episodes_for(tenant, scope.replace(states=scope.visible_states)).order_by("last_occurred_at", "pk")
    if retrievability_below is None:
        return list(qs.values_list("pk", flat=True))
    policy = read_policy(tenant)
    # Anchors never decay (docs/concepts.md#anchors-pinned-memories): a threshold never reaches them.
    rows = qs.filter(anchor=False).defer("embedding", "search_text")
    return [
        e.pk
        for e in rows
        if scoring.retrievability(scoring.EpisodeStats.from_episode(e), policy, now) < retrievability_below
    ]


def forget_journaled(
    *,
    tenant: Tenant,
    episode_id: int,
    now: datetime,
    actor: str,
    action: str = "forget",
    after: dict[str, Any] | None = None,
) -> Episode:
    """Soft forget one episode and journal it in the same transaction. Raises EpisodeNotFound."""
    with transaction.atomic():
        prior = (
            Episode.objects.select_for_update()
            .filter(tenant=tenant, pk=episode_id)
            .exclude(state=State.FORGOTTEN)
            .values(*FORGET_FIELDS)
            .first()
        )
        if prior is None:
            raise EpisodeNotFound(episode_id)
        episode = curation.episode_forget(tenant=tenant, episode_id=episode_id, now=now)
        journal_record(
            tenant=tenant,
            episode=episode,
            action=action,
            before=prior,
            after={"state": State.FORGOTTEN, "forgotten_at": now, **(after or {})},
            now=now,
            actor=actor,
        )
    return episode


def episode_restore(*, tenant: Tenant, episode_id: int, now: datetime, actor: str) -> Episode:
    """Undo a forget within the tenant's purge grace period, journaled in the same transaction:
    rolling the entry back forgets the episode again as it was. Raises EpisodeNotFound, and
    ConflictError when it is not forgotten or its grace period is over, or (PinnedCapExceeded)
    when it is pinned and the tenant's pins have no room for it any more."""
    grace_days = read_policy(tenant).purge_grace_days
    with transaction.atomic():
        prior = (
            Episode.objects.select_for_update()
            .filter(tenant=tenant, pk=episode_id)
            .values(*FORGET_FIELDS, "anchor", "hot_bytes")
            .first()
        )
        if prior is None:
            raise EpisodeNotFound(episode_id)
        pinned, weight = prior.pop("anchor"), prior.pop("hot_bytes")
        if prior["state"] == State.FORGOTTEN:  # a forgotten anchor weighs nothing until it is back
            pin_check(
                tenant=tenant, adding=pinned_weight(anchor=pinned, state=State.ACTIVE, hot_bytes=weight)
            )
        episode = curation.episode_restore(
            tenant=tenant, episode_id=episode_id, now=now, grace_days=grace_days
        )
        journal_record(
            tenant=tenant,
            episode=episode,
            action="restore",
            before=prior,
            after={name: getattr(episode, name) for name in FORGET_FIELDS},
            now=now,
            actor=actor,
        )
    return episode


def forget_apply(*, tenant: Tenant, episode_ids: Sequence[int], now: datetime, actor: str) -> list[int]:
    """Forget each episode in its own transaction; returns those forgotten (others went meanwhile)."""
    done = []
    for episode_id in episode_ids:
        try:
            forget_journaled(tenant=tenant, episode_id=episode_id, now=now, actor=actor)
        except EpisodeNotFound:
            continue
        done.append(episode_id)
    return done


def purge_due(tenant: Tenant, now: datetime, grace_days: int) -> QuerySet[Episode]:
    """The episodes forgotten more than ``grace_days`` before ``now``: the purge's to delete."""
    return Episode.objects.for_tenant(tenant).filter(
        state=State.FORGOTTEN, forgotten_at__lt=now - timedelta(days=grace_days)
    )


def purge_forgotten(
    *, tenant: Tenant, now: datetime, grace_days: int, run: TickRun | None = None
) -> tuple[int, list[tuple[int, Exception]]]:
    """Delete for good the episodes forgotten more than ``grace_days`` ago (turns and links go with
    them). The journal keeps a note of each; it cannot be rolled back."""
    purged = 0
    failed: list[tuple[int, Exception]] = []
    for episode in purge_due(tenant, now, grace_days).defer("embedding", "search_text").order_by("pk"):
        turn_ids = list(episode.turns.values_list("pk", flat=True))
        try:
            # Redis first: once the rows are gone nothing names the turn documents any more.
            hot_store().remove_episode(tenant.id.hex, episode.pk, turn_ids)
        except HotUnavailable as exc:
            failed.append((episode.pk, exc))
            continue
        with transaction.atomic():
            # What outlives the episode: its shape, nothing it said or whose it was (no title, no
            # owner), so an erasure of a person never has to look for it.
            note = {
                "kind": episode.kind,
                "layer": episode.layer,
                "turn_count": episode.turn_count,
                "forgotten_at": episode.forgotten_at,
            }
            deleted, _ = Episode.objects.filter(
                tenant=tenant, pk=episode.pk, version=episode.version, state=State.FORGOTTEN
            ).delete()
            if deleted:
                journal_record(
                    tenant=tenant,
                    episode=None,
                    episode_id=episode.pk,
                    action="purge",
                    before=note,
                    after={},
                    now=now,
                    actor="tick" if run is not None else "service",
                    tick_run=run,
                )
                purged += 1
    if purged:
        # The one irreversible step: who and how many, never what the memories said.
        logger.info("purged %d forgotten episode(s) of tenant %r for good", purged, tenant.name)
    return purged, failed
