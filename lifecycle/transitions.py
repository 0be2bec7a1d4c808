"""How an episode goes hot -> warm -> cold and back: the only code that writes an episode's layer.

Every move is one transaction that
- writes only if the episode is still the version (and layer) it was read at: anything that
  touched it meanwhile (a search recorded a use, a turn arrived) makes the move abandon, as seed
  001 asks ("halt on touch");
- journals the fields it changes with their values before, so a rollback is exact;
- keeps Redis in step after the commit: the hot documents leave on the way down and come back on
  the way up (``hotsync``; a missed Redis write leaves ``needs_reindex`` for the repair).

Who calls what: the tick (``moves``) demotes by the policy and promotes by repeated use; unpacking
(the API's unpack and deep reads, the admin) and pinning a cold episode promote; a rollback puts
journaled fields back (``revert``). What a packed episode holds is ``compression``'s; what it looks
like to a caller is ``episodes.shapes``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F

from episodes.indexing import collect_hot_garbage, hot_remove_packed
from episodes.language import index_text
from episodes.models import SEARCH_TEXT_LIMIT, Episode, Layer, State
from memory_platform.tenancy.models import Tenant

from .compression import ColdShape, WarmShape, cold_index_text
from .hotsync import sync_episode
from .journal import CONTENT_FIELDS, journal_record, snapshot
from .models import AccessWindow, TickRun

#: Why an episode comes back to hot, and the journal action that records it.
PROMOTE_ACTIONS = {"use": "promote", "unpack": "unpack", "pin": "pin"}


@dataclass(frozen=True)
class Move:
    """Who moves an episode, and when: ``actor`` is "tick", "api:<key prefix>" or "admin:<user>".

    ``checkpoint`` (the tick's fault hook) is called with "compressed:<id>" before the write and
    "moved:<id>" between the commit and Redis."""

    now: datetime
    actor: str
    tick_run: TickRun | None = None
    checkpoint: Callable[[str], None] | None = None

    def at(self, label: str) -> None:
        if self.checkpoint is not None:
            self.checkpoint(label)


def _write(episode: Episode, expected_layer: str, fields: Mapping[str, Any]) -> bool:
    """The optimistic write: only if nobody touched the episode since it was read."""
    updated = (
        Episode.objects.filter(
            tenant_id=episode.tenant_id, pk=episode.pk, version=episode.version, layer=expected_layer
        )
        .exclude(state=State.FORGOTTEN)
        .update(version=F("version") + 1, **fields)
    )
    if updated:
        for name, value in fields.items():
            setattr(episode, name, value)
        episode.version += 1
        if "layer" in fields:
            _layers_moved(episode)
    return bool(updated)


def _layers_moved(episode: Episode) -> None:
    """In the move's transaction: the tenant's split between the tiers changed."""
    Tenant.objects.filter(pk=episode.tenant_id).update(layers_version=F("layers_version") + 1)


def warm_text_fields(warm: WarmShape) -> dict[str, Any]:
    """What full text reads of a warm episode (its shape's text) and its packed size."""
    return {"search_text": index_text(warm.text())[:SEARCH_TEXT_LIMIT], "packed_chars": warm.chars}


def cold_text_fields(cold: ColdShape, entities: list[str]) -> dict[str, Any]:
    """What full text reads of a cold episode (its shape plus the entities every layer keeps) and
    its packed size."""
    return {"search_text": index_text(cold_index_text(cold, entities)), "packed_chars": cold.chars}


def write_if_unchanged(episode: Episode, expected_layer: str, **fields: Any) -> bool:
    """The optimistic write of a change that keeps the layer (a state, the warm gradient)."""
    if "layer" in fields:
        raise ValueError("a layer changes only through promote, demote_to_warm, demote_to_cold or revert")
    return _write(episode, expected_layer, fields)


def journal(
    move: Move, episode: Episode, action: str, before: Mapping[str, Any], after: Mapping[str, Any]
) -> None:
    """Journal a change of the episode in the caller's transaction (so both commit, or neither)."""
    journal_record(
        tenant=episode.tenant,
        episode=episode,
        action=action,
        before=before,
        after=after,
        now=move.now,
        actor=move.actor,
        tick_run=move.tick_run,
    )


def _sync_after_commit(move: Move, episode: Episode) -> None:
    tenant_id, episode_id = episode.tenant_id, episode.pk

    def sync() -> None:
        move.at(f"moved:{episode_id}")
        sync_episode(tenant_id, episode_id)

    transaction.on_commit(sync)


def promote(
    episode: Episode,
    *,
    reason: str,
    move: Move,
    also: Mapping[str, Any] | None = None,
    note: Mapping[str, Any] | None = None,
) -> bool:
    """Back to hot, whole: the turns are the searchable text again, the packed copy stays on the
    row (marked ``restored_at``) so the move can be undone. ``reason`` is "use" (the tick: repeated
    use), "unpack" or "pin"; ``also`` are fields written with the move (pinning sets ``anchor``).
    Returns False when the episode was touched meanwhile (or is hot already)."""
    if reason not in PROMOTE_ACTIONS:
        raise ValueError(f"unknown reason {reason!r}; choose one of {sorted(PROMOTE_ACTIONS)}")
    previous = episode.layer
    if previous == Layer.HOT:
        return False
    turns_text = "\n".join(episode.turns.order_by("seq", "id").values_list("text", flat=True))
    also = dict(also or {})
    move.at(f"compressed:{episode.pk}")
    with transaction.atomic():
        before = snapshot(episode, (*CONTENT_FIELDS, *also))
        fields = {
            "layer": Layer.HOT,
            "restored_at": move.now,
            "search_text": index_text(turns_text)[:SEARCH_TEXT_LIMIT],
            "needs_reindex": True,
            **also,
        }
        if not _write(episode, previous, fields):
            return False
        AccessWindow.objects.filter(episode=episode).delete()
        after = {"layer": Layer.HOT, "from": previous, "restored_at": move.now, "reason": reason, **also}
        journal(move, episode, PROMOTE_ACTIONS[reason], before, {**after, **(note or {})})
        _sync_after_commit(move, episode)
    return True


def demote_to_warm(
    episode: Episode,
    warm: WarmShape,
    *,
    move: Move,
    reason: str,
    source: str,
    leaving: list[Episode] | None = None,
) -> bool:
    """Hot -> warm: the summary and key points (``warm``) become its shape and searchable text;
    its turns stay in Postgres and leave Redis. ``reason`` says which rule sent it (idle,
    session_cap, hot_quota, operator); ``source`` which summariser packed it.

    Its documents leave Redis after the commit; with ``leaving``, the episode is added to that
    list after the commit instead, and the caller takes the list's documents out together
    (``leave_hot``)."""
    move.at(f"compressed:{episode.pk}")
    with transaction.atomic():
        before = snapshot(episode)
        fields = {
            "layer": Layer.WARM,
            "summary": warm.summary,
            "key_points": warm.key_points,
            "entities": warm.entities,
            "decisions": warm.decisions,
            **warm_text_fields(warm),
            # Redis still holds its documents until the removal after commit succeeds.
            "needs_reindex": True,
        }
        if not _write(episode, Layer.HOT, fields):
            return False
        # Repeated use within hot_days brings it back (see moves.step_promote): count from here.
        AccessWindow.objects.update_or_create(
            episode=episode,
            defaults={
                "tenant": episode.tenant,
                "started_at": move.now,
                "access_count_at_start": episode.access_count,
            },
        )
        after = {k: fields[k] for k in ("layer", "summary", "key_points", "packed_chars")}
        journal(move, episode, "hot_to_warm", before, {**after, "reason": reason, "source": source})

        if leaving is None:
            transaction.on_commit(lambda: leave_hot(move, [episode], collect=False))
        else:
            transaction.on_commit(lambda: leaving.append(episode))
    return True


def leave_hot(move: Move, episodes: list[Episode], *, collect: bool) -> None:
    """Take packed episodes' documents out of Redis (each clears its ``needs_reindex`` once Redis
    has let go; a failure leaves it for the repair). ``collect``: then purge them from the
    tenant's BM25 statistics at once (a fork of Redis: too costly per episode, cheap per batch),
    for a whole batch of moves: a removed document counted there can rank a word found in nearly
    every turn above all others until RediSearch's own collector runs (docs/decisions/0033)."""
    for episode in episodes:
        move.at(f"moved:{episode.pk}")
        hot_remove_packed(episode)
    if collect and episodes:
        collect_hot_garbage(episodes[0].tenant)


def demote_to_cold(episode: Episode, cold: ColdShape, *, move: Move) -> bool:
    """Warm -> cold: a headline and tags are its shape; its searchable text is that shape plus the
    entities every layer keeps. The warm copy stays on the row: unpacking and rollback need
    nothing else. An anchor never goes cold (a database constraint says so too)."""
    if episode.anchor:
        raise ValueError(f"episode {episode.pk} is an anchor: anchors never go cold")
    move.at(f"compressed:{episode.pk}")
    with transaction.atomic():
        before = snapshot(episode)
        packed = ColdShape(cold.headline[:200], [tag[:100] for tag in cold.tags], cold.source)
        fields = {
            "layer": Layer.COLD,
            "headline": packed.headline,
            "keywords": packed.tags,
            **cold_text_fields(packed, list(episode.entities)),
        }
        if not _write(episode, Layer.WARM, fields):
            return False
        after = {k: v for k, v in fields.items() if k != "search_text"}
        journal(move, episode, "warm_to_cold", before, {**after, "source": cold.source})
    return True


def revert(episode: Episode, fields: Mapping[str, Any], *, on_commit_sync: bool = True) -> None:
    """Put journaled fields back (a rollback, which journals itself): the layer among them when
    the entry moved it. Not optimistic: the rollback holds the row locked, and the version moves
    on, so a move that read the episode before abandons. Redis follows after the commit."""
    if fields:
        Episode.objects.filter(tenant_id=episode.tenant_id, pk=episode.pk).update(
            version=F("version") + 1, **fields
        )
        if "layer" in fields:
            _layers_moved(episode)
    if on_commit_sync:
        transaction.on_commit(lambda: sync_episode(episode.tenant_id, episode.pk))
