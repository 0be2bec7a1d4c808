"""Managing stored episodes: lock one for a write, forget and restore it, link it to another.

Like ``services``, every write takes ``now`` from its caller and touches the hot index only after
commit. Forget and restore here are the bare writes: callers go through ``lifecycle.forgetting``,
which journals them in the same transaction (this app cannot import the journal).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F

from memory_platform.conf import memory_settings
from memory_platform.tenancy.models import Tenant

from .indexing import episodes_index_hot, hot_remove
from .models import Episode, Layer, Link, State
from .services import ConflictError, EpisodeNotFound
from .stores.hot import HotUnavailable

logger = logging.getLogger(__name__)


def episode_for_update(tenant: Tenant, episode_id: int, *, include_forgotten: bool = False) -> Episode:
    """The tenant's episode, its row locked until the caller's transaction ends. Raises EpisodeNotFound."""
    qs = (
        Episode.objects.select_for_update(of=("self",))
        .filter(tenant=tenant, pk=episode_id)
        .select_related("tenant")
    )
    if not include_forgotten:
        qs = qs.exclude(state=State.FORGOTTEN)
    episode = qs.first()
    if episode is None:
        raise EpisodeNotFound(episode_id)
    return episode


def _bump(episode: Episode, **fields: Any) -> None:
    Episode.objects.for_tenant(episode.tenant_id).filter(pk=episode.pk).update(
        version=F("version") + 1, **fields
    )
    for name, value in fields.items():
        setattr(episode, name, value)


def _reindex_after_commit(tenant: Tenant, episode_id: int) -> None:
    def run() -> None:
        try:
            episodes_index_hot(tenant.pk, [episode_id])
        except HotUnavailable as exc:
            logger.warning(
                "hot index unavailable; episode %s stays marked for re-indexing: %s", episode_id, exc
            )

    transaction.on_commit(run)


def episode_forget(*, tenant: Tenant, episode_id: int, now: datetime) -> Episode:
    """Soft forget: out of Redis and every read at once; the row stays for the grace period.
    Not journaled: ``lifecycle.forgetting.forget_journaled`` is the way in."""
    with transaction.atomic():
        episode = episode_for_update(tenant, episode_id)
        _bump(episode, state_before_forget=episode.state, state=State.FORGOTTEN, forgotten_at=now)
        transaction.on_commit(lambda: hot_remove(episode))
    return episode


def episode_restore(
    *, tenant: Tenant, episode_id: int, now: datetime, grace_days: int | None = None
) -> Episode:
    """Bring a forgotten episode back within ``grace_days`` (default: the platform's). Not
    journaled: ``lifecycle.forgetting.episode_restore`` is the way in."""
    grace = timedelta(days=grace_days if grace_days is not None else int(memory_settings.PURGE_GRACE_DAYS))
    with transaction.atomic():
        episode = episode_for_update(tenant, episode_id, include_forgotten=True)
        if episode.state != State.FORGOTTEN:
            raise ConflictError("this memory is not forgotten")
        if episode.forgotten_at is not None and now - episode.forgotten_at > grace:
            raise ConflictError("the grace period for restoring this memory is over")
        _bump(
            episode,
            state=episode.state_before_forget or State.ACTIVE,
            state_before_forget="",
            forgotten_at=None,
            needs_reindex=episode.layer == Layer.HOT,
        )
        if episode.layer == Layer.HOT:
            _reindex_after_commit(tenant, episode.pk)
    return episode


def link_create(*, tenant: Tenant, src_id: int, dst_id: int, kind: str, now: datetime) -> tuple[Link, bool]:
    if src_id == dst_id:
        raise ValueError("an episode cannot link to itself")
    with transaction.atomic():
        src = episode_for_update(tenant, src_id)
        dst = episode_for_update(tenant, dst_id)
        link, created = Link.objects.get_or_create(
            tenant=tenant, src=src, dst=dst, kind=kind, defaults={"created_at": now}
        )
        if created:
            Episode.objects.filter(tenant=tenant, pk__in=[src.pk, dst.pk]).update(
                last_linked_at=now, version=F("version") + 1
            )
    return link, created
