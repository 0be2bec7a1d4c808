"""The journal: every change the lifecycle (or an operator, or a tenant's forget) makes to an
episode, with enough of the state before it to undo it: nothing the lifecycle does is irreversible
(docs/concepts.md#journal-and-rollback).

Values are stored as JSON: datetimes as ISO strings, read back through the model field's type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db import models
from django.utils.dateparse import parse_datetime

from episodes.models import Episode
from memory_platform.tenancy.models import Tenant

from .models import JournalEntry, TickRun

#: The episode fields a layer move may change; a move's "before" holds all of them, so a rollback
#: puts the episode back exactly as it was (the embedding and the turns are never changed by a move).
CONTENT_FIELDS = (
    "layer",
    "summary",
    "key_points",
    "headline",
    "keywords",
    "entities",
    "decisions",
    "search_text",
    "packed_chars",
    "restored_at",
    "needs_reindex",
)
#: What an operator may change by hand (``services.episode_edit``, the console's change form): what
#: the memory says and how it is labelled. Not its owner (``user_id``, ``agent_id``, ``session_id``:
#: its turns carry them too), nor its layer, state or anchor (the actions move those), nor usage.
EDITABLE_FIELDS = frozenset(
    {
        "title",
        "kind",
        "tags",
        "metadata",
        "summary",
        "key_points",
        "headline",
        "keywords",
        "entities",
        "decisions",
    }
)
#: The fields soft forgetting changes; a forget's "before" holds them, and a restore's.
FORGET_FIELDS = ("state", "state_before_forget", "forgotten_at")
#: The aggregates of an episode's turns, which an import that adds turns to it changes
#: (``rights.imports``; its entry also names the turns it added, which a rollback deletes).
TURN_AGGREGATE_FIELDS = ("first_occurred_at", "last_occurred_at", "turn_count", "raw_chars", "hot_bytes")
#: Fields a journaled change may restore. Usage counters are not among them: a rollback undoes what
#: the lifecycle or an operator did, never what the agents did.
RESTORABLE_FIELDS = (
    frozenset(CONTENT_FIELDS) | EDITABLE_FIELDS | {*FORGET_FIELDS, "anchor", *TURN_AGGREGATE_FIELDS}
)


def to_json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    return value


def from_json(field_name: str, value: Any) -> Any:
    """A journaled value back in the type of the Episode field it came from."""
    field = Episode._meta.get_field(field_name)
    if value is not None and isinstance(field, models.DateTimeField):
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"journal value for {field_name} is not a datetime: {value!r}")
        return parsed
    return value


def snapshot(episode: Episode, fields: Iterable[str] = CONTENT_FIELDS) -> dict[str, Any]:
    """The named fields of ``episode`` as JSON-ready values (call it before changing them)."""
    return {name: to_json(getattr(episode, name)) for name in fields}


def journal_record(
    *,
    tenant: Tenant,
    episode: Episode | None,
    action: str,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    now: datetime,
    actor: str = "",
    tick_run: TickRun | None = None,
    episode_id: int | None = None,
) -> JournalEntry:
    """Write one journal entry. Call it inside the transaction that makes the change, so the
    change and its record commit (or vanish) together."""
    return JournalEntry.objects.create(
        tenant=tenant,
        created_at=now,
        action=action,
        actor=actor or ("tick" if tick_run is not None else "api"),
        episode=episode,
        episode_id_value=episode.pk if episode is not None else episode_id,
        before=to_json(dict(before)),
        after=to_json(dict(after)),
        tick_run=tick_run,
    )
