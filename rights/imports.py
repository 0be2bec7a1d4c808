"""Taking an export back (``records``), into an empty or a non-empty tenant.

Everything is read and checked first (``reading.parse_export``): a bad line is a ``FormatError`` naming it,
and nothing has been written. Then the episodes go in by batches, each batch one transaction:

- an episode the tenant does not hold is created as exported (its layer, shape, state and usage),
  with its turns;
- an episode it holds (the same public id) and that is the same is left alone: importing twice
  changes nothing;
- one that differs is written over, journaled (``import``, the fields' values before and the turns
  it added), so a rollback puts it back exactly; its usage stays the target's, and one owned by
  another user, agent or session is skipped.

Vectors are kept when the export's model and dimension are the tenant's; otherwise the turns are
embedded again with the tenant's embedder (or imported without vectors when it computes none). The
hot episodes are then indexed in Redis, as the lifecycle leaves them; the packed ones are not.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, TypedDict

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from typing_extensions import Doc

from episodes.indexing import centroid, episodes_index_hot
from episodes.models import Episode, ForgottenUser, Layer, Link, State, Turn
from episodes.stores.hot import HotUnavailable
from lifecycle.hotsync import sync_episode
from lifecycle.journal import journal_record, snapshot, to_json
from lifecycle.models import AccessWindow, JournalEntry, MemoryPolicy, policy_row
from lifecycle.policy_json import PolicySerializer
from lifecycle.quota import make_room, pin_check, pinned_weight
from lifecycle.services import policy_save
from memory_platform import counters
from memory_platform.embeddings import EmbeddingError, embedder_for
from memory_platform.tenancy.models import Tenant

from . import records
from .reading import EpisodeIn, ExportIn
from .records import FormatError

#: Called after each batch with (done, in the import, what they are: "episodes", "memories" or
#: "turns").
Progress = Callable[[int, int, str], None]
BATCH = 100


class ImportSummary(TypedDict):
    """``POST /import``: what the import did, per kind of record (created, unchanged, ...)."""

    format: str
    episodes: dict[str, int]
    turns: dict[str, int]
    links: dict[str, int]
    journal: dict[str, int]
    vectors: str
    policy: str
    counters: str
    indexed: Annotated[int, Doc("episodes indexed in the hot tier")]
    notes: Annotated[list[str], Doc("at most 50")]


@dataclass
class ImportReport:
    """What an import did, per kind of record: the API's answer and the command's summary."""

    format: str
    episodes: Counter[str] = field(default_factory=Counter)
    turns: Counter[str] = field(default_factory=Counter)
    links: Counter[str] = field(default_factory=Counter)
    journal: Counter[str] = field(default_factory=Counter)
    vectors: str = "kept"
    policy: str = "kept"
    counters: str = "not in the import"
    indexed: int = 0
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.notes) < 50:
            self.notes.append(text)

    def as_json(self) -> ImportSummary:
        return {
            "format": self.format,
            "episodes": dict(+self.episodes),
            "turns": dict(+self.turns),
            "links": dict(+self.links),
            "journal": dict(+self.journal),
            "vectors": self.vectors,
            "policy": self.policy,
            "counters": self.counters,
            "indexed": self.indexed,
            "notes": self.notes,
        }


def import_export(
    *,
    tenant: Tenant,
    data: ExportIn,
    now: datetime,
    actor: str,
    progress: Progress | None = None,
) -> ImportReport:
    """Write a checked export into ``tenant`` (see the module's docstring); returns what it did."""
    report = ImportReport(format=records.FORMAT)
    was_empty = not Episode.objects.filter(tenant=tenant).exists()
    policy = _policy(tenant, data.policy, data.policy_line) if was_empty and data.policy else None
    embedder = embedder_for(tenant)
    model = data.header["embedding"]
    keep = model["model"] == embedder.model_id and model["dim"] == tenant.embedding_dim
    report.vectors = "kept" if keep else "embedded again" if embedder.computes else "left out"
    if not keep:
        report.note(
            f"the export's vectors were made by {model['model']} ({model['dim']}-d); this tenant "
            f"uses {embedder.model_id} ({tenant.embedding_dim}-d)"
        )
    forgotten = set(ForgottenUser.among(tenant, (e.fields.get("user_id", "") for e in data.episodes)))

    episodes = [e for e in data.episodes if e.fields.get("user_id", "") not in forgotten]
    if len(episodes) < len(data.episodes):
        report.episodes["skipped"] += len(data.episodes) - len(episodes)
        report.note(
            f"{len(data.episodes) - len(episodes)} episode(s) of users erased from this tenant left out"
        )
    with transaction.atomic():  # the pins of the whole import, refused before anything is written
        held = Episode.objects.filter(tenant=tenant, public_id__in=[e.public_id for e in episodes])
        adding = _pins_added({e.public_id: e for e in held}, episodes)
        pin_check(tenant=tenant, adding=adding, policy=policy.values() if policy is not None else None)
    if policy is not None:
        policy_save(policy=policy, now=now, actor=actor)
        report.policy = "applied (the tenant held no memory)"
    elif data.policy:
        report.policy = "kept: the tenant already holds memory"
    for start in range(0, len(episodes), BATCH):
        batch = episodes[start : start + BATCH]
        if not keep:
            _embed_again(tenant, batch, computes=embedder.computes)
        written = _write_batch(tenant, batch, now, actor, report)
        # Hot as exported, within the tenant's hot quota as ingest keeps it (pins have their cap).
        make_room(tenant=tenant, now=now, arriving=written, actor=actor)
        hot = list(
            Episode.objects.filter(tenant=tenant, pk__in=written, layer=Layer.HOT)
            .exclude(state=State.FORGOTTEN)
            .values_list("pk", flat=True)
        )
        try:
            report.indexed += episodes_index_hot(tenant.pk, hot)
        except (*HotUnavailable, EmbeddingError) as exc:
            # They keep needs_reindex: the repair task indexes them (search reads Postgres meanwhile).
            report.note(f"hot index: {exc}; the repair task indexes the rest")
        if progress is not None:
            progress(min(start + BATCH, len(episodes)), len(episodes), "episodes")

    _write_links(tenant, data.links, now, report)
    _write_journal(tenant, data.journal, report)
    if data.counters is not None:
        if was_empty:
            counters.add_fields(tenant.pk, data.counters)
            report.counters = "added (the tenant held no memory)"
        else:
            report.counters = "left out: the tenant already holds memory"
    return report


def _policy(tenant: Tenant, values: Mapping[str, Any], line: int) -> MemoryPolicy:
    """The tenant's policy with the export's values (``reading`` checked each), checked like the
    API's against the tenant's other values (``FormatError`` naming the policy's line)."""
    policy = policy_row(tenant)
    serializer = PolicySerializer(policy, data=dict(values), partial=True)
    if not serializer.is_valid():
        raise FormatError(line, f"policy: {json.dumps(serializer.errors, ensure_ascii=False)}")
    for name, value in serializer.validated_data.items():
        setattr(policy, name, value)
    try:
        policy.full_clean()
    except ValidationError as exc:
        raise FormatError(line, f"policy: {'; '.join(exc.messages)}") from None
    return policy


def _embed_again(tenant: Tenant, batch: list[EpisodeIn], *, computes: bool) -> None:
    """Vectors of the tenant's own model for the batch's turns (their window vectors are made when
    they are indexed); an episode's vector is its turns' centroid, as ingest makes it."""
    turns = [t for e in batch for t in e.turns]
    vectors: Any = (
        embedder_for(tenant).embed([t.fields["text"] for t in turns]) if computes and turns else None
    )
    for i, turn in enumerate(turns):
        turn.vector = None if vectors is None else vectors[i]
        turn.context_vector = None
    for episode in batch:
        own = [t.vector for t in episode.turns if t.vector is not None]
        episode.vector = centroid(own) if own else None


def _pins_added(existing: Mapping[str, Episode], batch: list[EpisodeIn]) -> int:
    """What the import adds to the tenant's pinned bytes (``quota.pinned_weight``): new pinned
    episodes, and held ones it pins, restores or gives more turns; what it unpins is not counted
    against it, so a later batch can never find less room than this figure."""
    names = ("anchor", "state", "hot_bytes")
    adding = 0
    for e in batch:
        held = existing.get(e.public_id)
        if held is not None and any(
            getattr(held, name) != e.fields.get(name, "") for name in records.OWNER_FIELDS
        ):
            continue  # another owner's: skipped by the import
        current = {name: getattr(held, name) for name in names} if held is not None else None
        imported = {"anchor": False, "state": State.ACTIVE, "hot_bytes": 0, **(current or {})}
        imported.update({name: e.fields[name] for name in names if name in e.fields})
        adding += max(0, pinned_weight(**imported) - (pinned_weight(**current) if current else 0))
    return adding


def _changed(episode: Episode, values: Mapping[str, Any]) -> list[str]:
    """The overwritten fields whose values differ."""
    return [
        name
        for name in records.OVERWRITTEN_FIELDS
        if name in values and to_json(getattr(episode, name)) != to_json(values[name])
    ]


def _write_batch(
    tenant: Tenant, batch: list[EpisodeIn], now: datetime, actor: str, report: ImportReport
) -> list[int]:
    """One transaction: the batch's new episodes and turns, and the journaled overwrites."""
    written: list[int] = []
    with transaction.atomic():
        existing = {
            e.public_id: e
            for e in Episode.objects.select_for_update().filter(
                tenant=tenant, public_id__in=[e.public_id for e in batch]
            )
        }
        pin_check(tenant=tenant, adding=_pins_added(existing, batch))  # pins made meanwhile count
        turn_ids = [t.public_id for e in batch for t in e.turns]
        held = dict(
            Turn.objects.filter(tenant=tenant, public_id__in=turn_ids).values_list("public_id", "episode_id")
        )
        new = [e for e in batch if e.public_id not in existing]
        created = Episode.objects.bulk_create(
            [
                Episode(
                    tenant=tenant,
                    public_id=e.public_id,
                    embedding=e.vector,
                    needs_reindex=e.fields.get("layer", Layer.HOT) == Layer.HOT,
                    **e.fields,
                )
                for e in new
            ]
        )
        AccessWindow.objects.bulk_create(
            [
                AccessWindow(tenant=tenant, episode=row, **e.window)
                for e, row in zip(new, created, strict=True)
                if e.window
            ]
        )
        rows: list[Turn] = []
        for e, row in zip(new, created, strict=True):
            rows += _turn_rows(tenant, row, e, held, report)
            written.append(row.pk)
        Turn.objects.bulk_create(rows)
        report.episodes["created"] += len(created)
        report.turns["created"] += len(rows)
        for e in batch:
            if e.public_id in existing and _overwrite(
                tenant, existing[e.public_id], e, held, now, actor, report
            ):
                written.append(existing[e.public_id].pk)
    return written


def _turn_rows(
    tenant: Tenant, episode: Episode, e: EpisodeIn, held: Mapping[str, int], report: ImportReport
) -> list[Turn]:
    rows = []
    for t in e.turns:
        if t.public_id in held:
            if held[t.public_id] != episode.pk:
                report.turns["skipped"] += 1
                report.note(f"turn {t.public_id} is held by another episode of this tenant; left out")
            else:
                report.turns["unchanged"] += 1
            continue
        rows.append(
            Turn(
                tenant=tenant,
                episode=episode,
                public_id=t.public_id,
                embedding=t.vector,
                context_embedding=t.context_vector,
                **t.fields,
            )
        )
    return rows


def _overwrite(
    tenant: Tenant,
    episode: Episode,
    e: EpisodeIn,
    held: Mapping[str, int],
    now: datetime,
    actor: str,
    report: ImportReport,
) -> bool:
    """Write the import over an episode the tenant holds, journaled; False when it is the same."""
    if any(getattr(episode, name) != e.fields.get(name, "") for name in records.OWNER_FIELDS):
        report.episodes["skipped"] += 1
        report.note(f"episode {e.public_id} belongs to another user, agent or session here; left out")
        return False
    changed = _changed(episode, e.fields)
    rows = _turn_rows(tenant, episode, e, held, report)
    if not changed and not rows:
        report.episodes["unchanged"] += 1
        return False
    before = snapshot(episode, changed)
    values = {name: e.fields[name] for name in changed}
    Episode.objects.for_tenant(episode.tenant_id).filter(pk=episode.pk).update(
        version=F("version") + 1, needs_reindex=True, **values
    )
    created = Turn.objects.bulk_create(rows)
    journal_record(
        tenant=tenant,
        episode=episode,
        action="import",
        before=before,
        after={**values, "turns_created": [t.pk for t in created]},
        now=now,
        actor=actor,
    )
    transaction.on_commit(lambda: sync_episode(tenant.pk, episode.pk))
    report.episodes["updated"] += 1
    report.turns["created"] += len(created)
    return True


def _write_links(
    tenant: Tenant, links: list[tuple[str, str, str, datetime | None]], now: datetime, report: ImportReport
) -> None:
    named = {p for src, dst, _, _ in links for p in (src, dst)}
    pks = dict(
        Episode.objects.filter(tenant=tenant, public_id__in=list(named)).values_list("public_id", "pk")
    )
    for src, dst, kind, created_at in links:
        if src not in pks or dst not in pks:
            report.links["skipped"] += 1
            continue
        _, made = Link.objects.get_or_create(
            tenant=tenant,
            src_id=pks[src],
            dst_id=pks[dst],
            kind=kind,
            defaults={"created_at": created_at or now},
        )
        report.links["created" if made else "unchanged"] += 1


def _write_journal(
    tenant: Tenant, entries: list[tuple[str | None, dict[str, Any]]], report: ImportReport
) -> None:
    """The export's history, as history: marked ``imported`` (its ids are the other system's), so
    it is never rolled back here. An entry already imported (same episode, action, time, actor) is
    not written again."""
    named = {owner for owner, _ in entries if owner}
    pks = dict(
        Episode.objects.filter(tenant=tenant, public_id__in=list(named)).values_list("public_id", "pk")
    )
    held: set[tuple[Any, ...]] = set(
        JournalEntry.objects.filter(tenant=tenant, after__imported=True).values_list(
            "episode_id", "action", "created_at", "actor"
        )
    )
    rows = []
    for owner, fields in entries:
        if owner is not None and owner not in pks:
            report.journal["skipped"] += 1
            continue
        episode_id = pks.get(owner) if owner else None
        key = (episode_id, fields["action"], fields["created_at"], fields["actor"])
        if key in held:
            report.journal["unchanged"] += 1
            continue
        held.add(key)
        rows.append(
            JournalEntry(
                tenant=tenant,
                episode_id=episode_id,
                episode_id_value=episode_id,
                **{**fields, "after": {**fields.get("after", {}), "imported": True}},
            )
        )
    JournalEntry.objects.bulk_create(rows)
    report.journal["created"] += len(rows)
