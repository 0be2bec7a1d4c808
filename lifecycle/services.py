"""The lifecycle's writes, in one place for callers (views, admin, tasks, the read path).

Ingest is the episodes app's, run here with the tenant's segmentation rules and hot quota (``quota``). The
work lives in modules of its own: ``tick`` (docs/concepts.md#the-tick), ``candidates`` (merge and delete
proposals and their decisions), ``forgetting`` (soft forget and restore, ForgetByThreshold, purge),
``rollback`` (undo from the journal) and ``hotsync`` (Redis following Postgres). An operator's hand edit of an
episode is here (``episode_edit``), journaled like the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from django.db import transaction
from django.db.models import Exists, F, Field

from episodes import services as episode_services
from episodes.curation import episode_for_update
from episodes.language import language_of
from episodes.models import Episode, Layer, Link, State, turn_hot_bytes
from episodes.services import (
    ConflictError,
    EpisodeNotFound,
    IngestResult,
    MemoryInput,
    TurnInput,
)
from memory_platform import counters
from memory_platform.embeddings import embedder_for_language
from memory_platform.tenancy.models import Tenant

from . import moves, scoring, transitions
from .candidates import CandidateError, candidate_approve, candidate_reject, withdraw_delete
from .compression import ColdShape, WarmShape, get_summariser
from .forgetting import episode_restore, forget_apply, forget_journaled, forget_select, purge_forgotten
from .hotsync import retag_state, sync_episode
from .journal import EDITABLE_FIELDS, journal_record, snapshot
from .models import MemoryPolicy, PolicyChange, read_policy
from .policy_rows import policy_diff
from .quota import PinnedCapExceeded, make_room, pin_check
from .rollback import RollbackError, rollback_journal_entry
from .selectors import segmentation_rules
from .tenant_policy import Policy
from .tick import STEPS, TickBusy, TickInterrupted, TickPreview, tick_preview, tick_run
from .updates import Written, updates_after_write, written_of

__all__ = [
    "STEPS",
    "CandidateError",
    "PinnedCapExceeded",
    "RollbackError",
    "TickBusy",
    "TickInterrupted",
    "TickPreview",
    "candidate_approve",
    "candidate_reject",
    "episode_edit",
    "episode_pack",
    "episode_pin",
    "episode_restore",
    "episode_unpack",
    "feedback_review",
    "link_remove",
    "forget_apply",
    "forget_journaled",
    "forget_select",
    "memory_create",
    "policy_save",
    "purge_forgotten",
    "rollback_journal_entry",
    "tenant_embedder_settle",
    "tick_preview",
    "tick_run",
    "turns_ingest",
]


def turns_ingest(
    *, tenant: Tenant, turns: Sequence[TurnInput], now: datetime, asynchronous: bool = False
) -> IngestResult:
    """Append turns, segmented by the tenant's policy, its hot tier kept within its quota."""
    policy = read_policy(tenant)  # one read for the turns' language and the segmentation rules
    tenant_embedder_settle(tenant=tenant, policy=policy)
    turns = [
        dataclasses.replace(t, language=language_of(t.text, given=t.language, default=policy.language))
        for t in turns
    ]
    result = episode_services.turns_ingest(
        tenant=tenant,
        turns=turns,
        now=now,
        rules=segmentation_rules(policy),
        make_room=lambda ids: make_room(tenant=tenant, now=now, arriving=ids, policy=policy),
        asynchronous=asynchronous,
    )
    counters.add(tenant.pk, "turns_ingested", len(turns))
    updates_after_write(tenant=tenant, written=written_of(turns, result, now), now=now, actor="ingest")
    return result


def tenant_embedder_settle(*, tenant: Tenant, policy: Policy) -> None:
    """Before a tenant's first memory is embedded: the multilingual model in place of the English
    one when its policy names a language that one reads poorly (``embedder_for_language``). A
    tenant that holds memory keeps the model that made its vectors: two models' vectors in one
    tenant would be compared as if they were one model's (docs/decisions/0043-multilingual-e5.md)."""
    chosen = embedder_for_language(tenant.embedder, policy.language)
    if chosen == tenant.embedder:
        return
    # One statement, checked against what is committed: of two first ingests, one switches and
    # the other finds the switch made, and none switches a tenant whose memory is written.
    # The tenant by value, not OuterRef("pk"): on Postgres distributed by tenant, the subquery
    # then names the shard it reads (docs/operations/scale-out.md).
    empty = ~Exists(Episode.objects.filter(tenant_id=tenant.pk))
    if Tenant.objects.filter(empty, pk=tenant.pk, embedder=tenant.embedder).update(embedder=chosen):
        tenant.embedder = chosen
    else:
        tenant.refresh_from_db(fields=["embedder"])


def memory_create(*, tenant: Tenant, memory: MemoryInput, now: datetime) -> Episode:
    """An explicit memory (a fact, a preference), its tenant's hot tier kept within its quota; a
    pinned one also within the tenant's pinned cap (PinnedCapExceeded, nothing written)."""
    policy = read_policy(tenant)
    tenant_embedder_settle(tenant=tenant, policy=policy)
    given = language_of(memory.text, given=memory.language, default=policy.language)
    # A pin is checked and written in one transaction (its lock keeps a concurrent pin out until
    # the commit), refused before anything is embedded or written. An unpinned memory is embedded
    # outside any transaction, as before.
    with transaction.atomic() if memory.anchor else contextlib.nullcontext():
        if memory.anchor:
            pin_check(tenant=tenant, adding=turn_hot_bytes(memory.text), policy=policy)
        episode = episode_services.memory_create(
            tenant=tenant,
            memory=dataclasses.replace(memory, language=given),
            now=now,
            make_room=lambda ids: make_room(tenant=tenant, now=now, arriving=ids),
        )
    counters.add(tenant.pk, "memories_created")
    written = Written(episode.pk, memory.text, episode.last_occurred_at)
    updates_after_write(tenant=tenant, written=[written], now=now, actor="api")
    return episode


def feedback_review(*, tenant: Tenant, used: Sequence[int], unused: Sequence[int], now: datetime) -> int:
    """FSRS-6 reviews from an agent's feedback (docs/concepts.md#fsrs-retrievability-and-stability): `Good`
    for a memory it used, `Hard` for one it was given and did not use. Returns the number of episodes
    reviewed."""
    policy = read_policy(tenant)
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
            Episode.objects.for_tenant(episode.tenant_id).filter(pk=episode.pk).update(
                stability=stability, difficulty=difficulty, last_review_at=now
            )
            if ratings[episode.pk] == "access":  # used: current again
                revive(tenant, episode, now=now, actor="feedback", why="used")
            reviewed += 1
    counters.write(
        tenant.pk,
        counts=[("feedback", {"kind": "used"}, len(used)), ("feedback", {"kind": "unused"}, len(unused))],
    )
    return reviewed


#: The states a use, a pin or an unpack brings back to active.
REVIVED_FROM = frozenset({State.DORMANT, State.DELETE_CANDIDATE})


def revive(tenant: Tenant, episode: Episode, *, now: datetime, actor: str, why: str) -> None:
    """A memory that was used (``why``: "used", "unpack") or pinned ("pin") is current again: a
    dormant memory or a delete candidate becomes active, and its open proposals are withdrawn
    (``candidates.withdraw_delete``), journaled as the tick's own changes of state are (a rollback
    restores the state and reopens the proposals). In the caller's transaction, on its locked row."""
    old = episode.state
    reviving = old in REVIVED_FROM
    withdrawn = withdraw_delete(
        tenant, episode, now, actor=actor, why=f"{why}: the memory is current again", merges=True
    )
    if not reviving and not withdrawn:
        return
    after: dict[str, Any] = {"reason": why, "withdrawn_candidates": withdrawn}
    if reviving:
        Episode.objects.filter(tenant=tenant, pk=episode.pk).update(
            state=State.ACTIVE, version=F("version") + 1
        )
        episode.state, after["state"] = State.ACTIVE, State.ACTIVE
        if episode.layer == Layer.HOT:  # default search filters on its documents' state tag
            transaction.on_commit(lambda: retag_state(episode, State.ACTIVE))
    journal_record(
        tenant=tenant,
        episode=episode,
        action="state" if reviving else "withdraw_candidates",
        before={"state": old} if reviving else {},
        after=after,
        now=now,
        actor=actor,
    )


def episode_pin(*, tenant: Tenant, episode_id: int, anchor: bool, now: datetime, actor: str) -> Episode:
    """Pin or unpin, journaled. A pinned episode never goes cold (docs/concepts.md#anchors-pinned-memories),
    so pinning a cold one brings it back to hot in the same move. A pin past the tenant's pinned cap raises
    PinnedCapExceeded and changes nothing (``quota.pin_check``)."""
    promoted = False
    with transaction.atomic():
        episode = episode_for_update(tenant, episode_id)
        if anchor and not episode.anchor:
            pin_check(tenant=tenant, adding=episode.hot_bytes)
        if episode.anchor != anchor:
            if anchor and episode.layer == Layer.COLD:
                move = transitions.Move(now=now, actor=actor)
                promoted = transitions.promote(episode, reason="pin", move=move, also={"anchor": True})
            else:
                Episode.objects.filter(tenant=tenant, pk=episode.pk).update(
                    anchor=anchor, version=F("version") + 1
                )
                journal_record(
                    tenant=tenant,
                    episode=episode,
                    action="anchor",
                    before={"anchor": episode.anchor},
                    after={"anchor": anchor},
                    now=now,
                    actor=actor,
                )
                if episode.layer == Layer.HOT:  # its documents carry the anchor tag
                    transaction.on_commit(lambda: sync_episode(tenant.pk, episode.pk))
            if anchor:  # a pinned memory never decays: it is no candidate for anything
                revive(tenant, episode, now=now, actor=actor, why="pin")
    if promoted:  # back in hot: the quota makes room for it (an anchor itself never leaves)
        make_room(tenant=tenant, now=now, arriving=[episode.pk], actor=actor)
    episode.refresh_from_db()
    return episode


def episode_unpack(*, tenant: Tenant, episode_id: int, now: datetime, actor: str) -> tuple[Episode, str]:
    """Back to hot, whole (docs/concepts.md#unpacking); returns the episode and the layer it left.
    An episode already hot stays as it is."""
    with transaction.atomic():
        episode = episode_for_update(tenant, episode_id)
        previous = episode.layer
        if previous != Layer.HOT:
            transitions.promote(episode, reason="unpack", move=transitions.Move(now=now, actor=actor))
        revive(tenant, episode, now=now, actor=actor, why="unpack")
    if previous != Layer.HOT:
        make_room(tenant=tenant, now=now, arriving=[episode.pk], actor=actor)
        counters.add(tenant.pk, "unpacks", layer=previous)
    return episode, previous


def episode_pack(*, tenant: Tenant, episode_id: int, layer: str, now: datetime, actor: str) -> Episode:
    """An operator packs an episode now, as the tick would: hot -> warm, and on to cold when
    ``layer`` is cold. Raises ConflictError when the move is not possible or the episode was
    touched while it was being compressed."""
    if layer not in (Layer.WARM, Layer.COLD):
        raise ValueError(f"an episode is packed to warm or cold, not {layer!r}")
    episode = Episode.objects.visible().filter(tenant=tenant, pk=episode_id).select_related("tenant").first()
    if episode is None:
        raise EpisodeNotFound(episode_id)
    if layer == Layer.COLD and episode.anchor:
        raise ConflictError("an anchor never goes cold; unpin it first")
    policy = read_policy(tenant)
    summariser = get_summariser(policy)
    move = transitions.Move(now=now, actor=actor)
    if episode.layer == Layer.HOT:
        warm = moves.warm_shape(episode, summariser, policy, now)
        if not transitions.demote_to_warm(episode, warm, move=move, reason="operator", source=warm.source):
            raise ConflictError("the episode changed while it was being packed; try again")
    cold = layer == Layer.COLD and episode.layer == Layer.WARM
    if cold and not transitions.demote_to_cold(episode, moves.cold_shape(episode, summariser), move=move):
        raise ConflictError("the episode changed while it was being packed; try again")
    return episode


def _shape_text(episode: Episode, values: Mapping[str, Any]) -> dict[str, Any]:
    """A warm or cold episode is searched by the text of its shape: when an edit changes the shape,
    its searchable text and packed size follow (``transitions``' rules)."""

    def new(name: str) -> Any:
        return values.get(name, getattr(episode, name))

    if episode.layer == Layer.WARM and values.keys() & {"summary", "key_points", "entities", "decisions"}:
        warm = WarmShape(
            new("summary"), list(new("key_points")), list(new("entities")), list(new("decisions"))
        )
        return transitions.warm_text_fields(warm)
    if episode.layer == Layer.COLD and values.keys() & {"headline", "keywords", "entities"}:
        return transitions.cold_text_fields(
            ColdShape(new("headline"), list(new("keywords"))), list(new("entities"))
        )
    return {}


def episode_edit(
    *, tenant: Tenant, episode_id: int, changes: Mapping[str, Any], now: datetime, actor: str
) -> Episode:
    """An operator's hand edit of the fields in ``journal.EDITABLE_FIELDS``, journaled ("edit")
    with the values before, so a rollback puts them back. Only values that differ are written;
    when none does, nothing is written or journaled. Raises ValueError for a field outside the
    list, django's ValidationError for a bad value, EpisodeNotFound (gone or forgotten)."""
    refused = sorted(set(changes) - EDITABLE_FIELDS)
    if refused:
        raise ValueError(f"not editable by hand: {', '.join(refused)}")
    with transaction.atomic():
        episode = episode_for_update(tenant, episode_id)
        values = {}
        for name, value in changes.items():
            field = cast("Field[Any, Any]", Episode._meta.get_field(name))  # all of them concrete
            cleaned = field.clean(value, episode)
            if cleaned != getattr(episode, name):
                values[name] = cleaned
        if not values:
            return episode
        values.update(_shape_text(episode, values))
        before = snapshot(episode, values)
        hot = episode.layer == Layer.HOT
        # A hot episode's documents carry its kind and tags: marked until Redis has followed.
        Episode.objects.filter(tenant=tenant, pk=episode.pk).update(
            version=F("version") + 1, **({"needs_reindex": True} if hot else {}), **values
        )
        journal_record(
            tenant=tenant, episode=episode, action="edit", before=before, after=values, now=now, actor=actor
        )
        if hot:
            transaction.on_commit(lambda: sync_episode(tenant.pk, episode.pk))
    episode.refresh_from_db()
    return episode


def link_remove(
    *, tenant: Tenant, src_id: int, dst_id: int, kind: str | None, now: datetime, actor: str
) -> int:
    """Remove the links from ``src_id`` to ``dst_id`` (of ``kind``, or of every kind), journaled
    ("unlink", the links in its after) so that a rollback puts them back. Returns how many went;
    raises EpisodeNotFound when the source is gone or forgotten."""
    with transaction.atomic():
        source = episode_for_update(tenant, src_id)
        links = Link.objects.filter(tenant=tenant, src_id=src_id, dst_id=dst_id)
        if kind:
            links = links.filter(kind=kind)
        removed = [list(row) for row in links.values_list("src_id", "dst_id", "kind", "created_at")]
        if removed:
            links.delete()
            journal_record(
                tenant=tenant,
                episode=source,
                action="unlink",
                before={},
                after={"links_deleted": removed},
                now=now,
                actor=actor,
            )
    return len(removed)


def policy_save(*, policy: MemoryPolicy, now: datetime, actor: str) -> PolicyChange | None:
    """Save a tenant's policy (validated) and record what changed, who and when; None when nothing
    did. The one way the admin, its preset actions and the API change a policy."""
    policy.full_clean()
    with transaction.atomic():
        before = (
            MemoryPolicy.objects.for_tenant(policy.tenant_id).select_for_update().filter(pk=policy.pk).first()
        )
        policy.save()
        changes = policy_diff(before, policy) if before is not None else {"created": [None, policy.preset]}
        if not changes:
            return None
        return PolicyChange.objects.create(
            tenant_id=policy.tenant_id, changed_at=now, actor=actor, changes=changes
        )
