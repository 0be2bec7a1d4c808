"""Rollback of journal entries (docs/concepts.md#journal-and-rollback): the fields, the links, the candidates
and the Redis index go back to what they were before the change.

Entries of one episode are undone newest first: rolling back an entry also rolls back every later,
not yet rolled back entry of the same episode, so the fields never mix two points in time (undoing
`hot_to_warm` of an episode that has gone cold since first undoes `warm_to_cold`).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, transaction

from episodes.models import Episode, Link, Turn
from episodes.stores import keys
from episodes.stores.hot import HotUnavailable, hot_store

from . import transitions
from .hotsync import sync_episode
from .journal import RESTORABLE_FIELDS, from_json, journal_record
from .models import Candidate, JournalEntry
from .quota import PinnedCapExceeded, pin_check, pinned_weight

logger = logging.getLogger(__name__)

#: What cannot be undone: a purge removed the data, and a rollback is undone by nothing but itself.
IRREVERSIBLE = frozenset({"purge", "rollback"})
#: Entries whose candidate was proposed by the entry itself (undo = withdraw the proposal).
PROPOSING = frozenset({"propose_merge", "state"})


class RollbackError(Exception):
    pass


def rollback_refusal(entry: JournalEntry) -> str:
    """Why ``entry`` cannot be rolled back, or "" (the console's confirmation page says it first;
    the rollback checks again on the locked row)."""
    if entry.rolled_back_at is not None:
        return f"journal entry {entry.pk} was already rolled back"
    if entry.action in IRREVERSIBLE:
        return f"a {entry.action!r} cannot be rolled back"
    if entry.episode_id is None:
        return f"episode #{entry.episode_id_value} no longer exists (purged)"
    if (entry.after or {}).get("imported"):
        return "an imported entry is the history of another system; it is not rolled back here"
    return ""


def rollback_plan(entry: JournalEntry, *, lock: bool = False) -> list[JournalEntry]:
    """What rolling ``entry`` back undoes, newest first: the later entries of its episode that
    stand, then the entry itself (the console's confirmation page lists them)."""
    if entry.episode_id is None:  # purged: nothing later to undo (and the entry cannot be)
        return [entry]
    later = JournalEntry.objects.filter(
        tenant_id=entry.tenant_id, episode_id=entry.episode_id, rolled_back_at__isnull=True, pk__gt=entry.pk
    ).exclude(action="rollback")
    later = later.exclude(after__has_key="imported")  # another system's history: never undone here
    if lock:
        later = later.select_for_update()
    return [*later.order_by("-pk"), entry]


def rollback_journal_entry(entry: JournalEntry, *, now: datetime, actor: str = "") -> list[JournalEntry]:
    """Undo ``entry`` (and the later entries of its episode); returns the entries undone, newest first."""
    try:
        with transaction.atomic():
            undone = _rollback(entry, now, actor)
    except IntegrityError as exc:  # e.g. an anchor cannot go back to cold; nothing was changed
        raise RollbackError(f"the prior state is not allowed any more: {exc}") from None
    return undone


def _rollback(entry: JournalEntry, now: datetime, actor: str) -> list[JournalEntry]:
    entry = (
        JournalEntry.objects.for_tenant(entry.tenant_id)
        .select_for_update()
        .select_related("tenant")
        .get(pk=entry.pk)
    )
    refusal = rollback_refusal(entry)
    if refusal or entry.episode_id is None:  # (the refusal covers a purged episode: for the types)
        raise RollbackError(refusal)
    episode = Episode.objects.select_for_update().get(tenant=entry.tenant, pk=entry.episode_id)
    undone = rollback_plan(entry, lock=True)
    _check_pins(episode, undone)
    for item in undone:
        if item.action in IRREVERSIBLE:
            raise RollbackError(f"entry {item.pk} ({item.action}) cannot be rolled back")
        _undo(item, episode)
        item.rolled_back_at = now
        item.save(update_fields=["rolled_back_at"])
    journal_record(
        tenant=entry.tenant,
        episode=episode,
        action="rollback",
        before={},
        after={"entries": [item.pk for item in undone]},
        now=now,
        actor=actor or "service",
    )
    # Re-index a hot episode whole (its state tag too), or take a packed one out of Redis.
    transaction.on_commit(lambda: sync_episode(episode.tenant_id, episode.pk))
    return undone


def _check_pins(episode: Episode, undone: list[JournalEntry]) -> None:
    """Refuse, before anything is written, a rollback that pins the episode again (an unpin
    undone, a forgotten anchor restored, turns of an anchor put back) past its tenant's pinned
    cap (``quota.pin_check``)."""
    names = ("anchor", "state", "hot_bytes")
    current = {name: getattr(episode, name) for name in names}
    restored = dict(current)
    for item in undone:  # newest first: the oldest entry's values are the ones that stay
        restored.update({name: from_json(name, item.before[name]) for name in names if name in item.before})
    adding = pinned_weight(**restored) - pinned_weight(**current)
    try:
        pin_check(tenant=episode.tenant, adding=adding)
    except PinnedCapExceeded as exc:
        raise RollbackError(str(exc)) from None


def _undo(entry: JournalEntry, episode: Episode) -> None:
    fields = {
        name: from_json(name, value) for name, value in entry.before.items() if name in RESTORABLE_FIELDS
    }
    # The version moves on: a migration that read the episode before the rollback abandons.
    transitions.revert(episode, fields, on_commit_sync=False)
    after = entry.after or {}
    _delete_turns(episode, after.get("turns_created", []))
    for src, dst, kind in after.get("links_created", []):
        Link.objects.filter(tenant=entry.tenant, src_id=src, dst_id=dst, kind=kind).delete()
    for src, dst, kind, created_at in after.get("links_deleted", []):
        Link.objects.get_or_create(
            tenant=entry.tenant, src_id=src, dst_id=dst, kind=kind, defaults={"created_at": created_at}
        )
    reopened = list(after.get("withdrawn_candidates", []))
    candidate_id = after.get("candidate_id")
    if candidate_id is not None:
        if entry.action in PROPOSING:
            Candidate.objects.filter(
                tenant_id=entry.tenant_id, pk=candidate_id, status=Candidate.Status.PROPOSED
            ).delete()
        else:  # an approval or a rejection: the proposal is open again
            reopened.append(candidate_id)
    if reopened:
        Candidate.objects.filter(tenant_id=entry.tenant_id, pk__in=reopened).update(
            status=Candidate.Status.PROPOSED, decided_at=None, decided_by="", note=""
        )


def _delete_turns(episode: Episode, turn_ids: list[int]) -> None:
    """Delete the turns an entry added (an import over an existing episode), and after the commit
    their documents in Redis (the episode's own are re-indexed by the rollback)."""
    if not turn_ids:
        return
    Turn.objects.filter(tenant_id=episode.tenant_id, episode=episode, pk__in=turn_ids).delete()
    tenant_hex = episode.tenant_id.hex

    def unindex() -> None:
        try:
            hot_store().client.unlink(*(keys.turn_key(tenant_hex, pk) for pk in turn_ids))
        except HotUnavailable as exc:
            logger.warning("rolled-back turns of episode %s left in Redis: %s", episode.pk, exc)

    transaction.on_commit(unindex)
