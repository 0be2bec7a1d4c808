"""The export format, version 1: JSON lines, one record a line, in this order.

- the header: ``{"type": "header", "format": "memory-platform-export", "version": 1, "exported_at": ..., "tenant": ...,
  "embedding": {"model": ..., "dim": ..., "encoding": "base64-float32-le"}, "filters": {...}}``
- ``{"type": "policy", "policy": {...}}``: the tenant's memory policy (secrets left out)
- ``{"type": "episode", "id": <public id>, <its fields>, "embedding": ..., "access_window": ...}``,
  each followed by its turns: ``{"type": "turn", "id": ..., "episode": <public id>, <its fields>,
  "embedding": ..., "context_embedding": ...}``. An episode is exported in its layer with its packed
  shape (summary, key points, headline, keywords) and its turns, which every layer keeps.
- ``{"type": "link", "src": ..., "dst": ..., "kind": ..., "created_at": ...}``
- ``{"type": "journal", "episode": <public id or null>, "action": ..., ...}``: the history
- ``{"type": "counters", "fields": {...}}``: the tenant's counters (``memory_platform.counters``)
- the end: ``{"type": "end", "counts": {<type>: n}}``; a file without it was cut short.

Vectors are the little-endian float32 bytes of the vector in base64, ``dim`` numbers (a tenant
whose model is narrower than the stored width exports its own width): exact, and a quarter of the
size of decimal numbers. Field values are JSON: datetimes in ISO 8601.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.db import models

from episodes import public_ids
from episodes.models import Episode, LinkKind, Turn
from lifecycle.journal import to_json
from lifecycle.models import AccessWindow, JournalEntry
from memory_platform.embeddings import to_storage

FORMAT = "memory-platform-export"
VERSION = 1
ENCODING = "base64-float32-le"

#: An episode's fields as exported: all but its keys, its vector (encoded apart), what Postgres
#: computes (``search_vector``) and the bookkeeping of this database (``version``, ``needs_reindex``).
EPISODE_FIELDS = tuple(
    f.name
    for f in Episode._meta.concrete_fields
    if f.name not in {"id", "tenant", "public_id", "embedding", "search_vector", "version", "needs_reindex"}
)
TURN_FIELDS = tuple(
    f.name
    for f in Turn._meta.concrete_fields
    if f.name not in {"id", "tenant", "episode", "public_id", "embedding", "context_embedding"}
)
#: An episode's usage: what the agents did with it. An import over an existing episode keeps the
#: target's (a rollback never restores usage either); a new episode takes the export's.
USAGE_FIELDS = (
    "access_count",
    "traverse_count",
    "last_accessed_at",
    "last_linked_at",
    "stability",
    "difficulty",
    "last_review_at",
)
OWNER_FIELDS = ("user_id", "agent_id", "session_id")
#: What an import writes over an existing episode of the same id (journaled, so it rolls back).
OVERWRITTEN_FIELDS = tuple(
    name for name in EPISODE_FIELDS if name not in {*USAGE_FIELDS, *OWNER_FIELDS, "created_at"}
)
JOURNAL_FIELDS = ("action", "actor", "created_at", "before", "after", "rolled_back_at")
RECORD_TYPES = ("policy", "episode", "turn", "link", "journal", "counters", "end")

_PUBLIC_ID = re.compile(public_ids.PATTERN)


class FormatError(ValueError):
    """A line of an import that is not what the format says: nothing has been written. ``where``
    names the place when it is not a line (the n-th memory of a JSON document)."""

    def __init__(self, line: int, message: str, *, where: str | None = None):
        super().__init__(f"{where or f'line {line}'}: {message}")
        self.line = line


# --- out ---------------------------------------------------------------------------------------------
def encode_vector(vector: Any, dim: int) -> str | None:
    if vector is None:
        return None
    array = np.asarray(vector, dtype="<f4")[:dim]
    return base64.b64encode(array.tobytes()).decode()


def episode_record(episode: Episode, dim: int, window: AccessWindow | None) -> dict[str, Any]:
    record: dict[str, Any] = {"type": "episode", "id": episode.public_id}
    record.update({name: to_json(getattr(episode, name)) for name in EPISODE_FIELDS})
    record["embedding"] = encode_vector(episode.embedding, dim)
    record["access_window"] = (
        {"started_at": to_json(window.started_at), "access_count_at_start": window.access_count_at_start}
        if window is not None
        else None
    )
    return record


def turn_record(turn: Turn, episode_public_id: str, dim: int) -> dict[str, Any]:
    record: dict[str, Any] = {"type": "turn", "id": turn.public_id, "episode": episode_public_id}
    record.update({name: to_json(getattr(turn, name)) for name in TURN_FIELDS})
    record["embedding"] = encode_vector(turn.embedding, dim)
    record["context_embedding"] = encode_vector(turn.context_embedding, dim)
    return record


def journal_record_of(entry: JournalEntry, episode_public_id: str | None) -> dict[str, Any]:
    record: dict[str, Any] = {"type": "journal", "episode": episode_public_id}
    record.update({name: to_json(getattr(entry, name)) for name in JOURNAL_FIELDS})
    return record


# --- in ----------------------------------------------------------------------------------------------
def decode_vector(value: Any, dim: int, line: int) -> np.ndarray | None:
    """A vector of the export, in the platform's stored width; None when it had none."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise FormatError(line, f"a vector is a base64 string ({ENCODING})")
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError:
        raise FormatError(line, "a vector is not valid base64") from None
    if len(raw) != 4 * dim:
        raise FormatError(line, f"a vector has {len(raw) // 4} numbers; the header says {dim}")
    array = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.isfinite(array).all():
        raise FormatError(line, "a vector holds NaN or infinite numbers")
    return to_storage(array)


def clean_fields(
    model: type[models.Model],
    names: tuple[str, ...],
    record: Mapping[str, Any],
    line: int,
    within: str = "",
) -> dict[str, Any]:
    """The record's values of ``names`` as the model's fields take them: the JSON type the export
    writes for the field, then the field's own rules (choices, length, range, null); a field the
    record leaves out takes the field's default. ``within`` names the object that holds them."""
    values: dict[str, Any] = {}
    for name in names:
        field = model._meta.get_field(name)
        assert isinstance(field, models.Field)
        label = f"{within}.{name}" if within else name
        if name not in record:
            if not field.has_default() and not field.null:
                raise FormatError(line, f"{within or record.get('type')} record without {name!r}")
            continue
        value = record[name]
        if not (value is None and field.null):
            expected = _json_type(field)
            if not expected.holds(value):
                raise FormatError(line, f"{label}: {expected.name}, not {json_kind(value)}")
        try:
            values[name] = field.clean(value, None)
        except ValidationError as exc:
            raise FormatError(line, f"{label}: {'; '.join(exc.messages)}") from None
        if isinstance(values[name], datetime):
            _check_datetime(values[name], label, line)
    return values


@dataclass(frozen=True)
class _JsonType:
    name: str
    holds: Callable[[Any], bool]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_STRING = _JsonType("a string", lambda v: isinstance(v, str))
_BOOLEAN = _JsonType("true or false", lambda v: isinstance(v, bool))
_INTEGER = _JsonType("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
_NUMBER = _JsonType("a number", _is_number)
_ANY = _JsonType("a JSON value", lambda v: True)


def _json_type(field: models.Field) -> _JsonType:
    """What JSON the export writes for a model field (``episode_record``: ``journal.to_json``)."""
    if isinstance(field, ArrayField):
        item = _json_type(field.base_field)
        return _JsonType(
            f"a list of {item.name.removeprefix('a ').removeprefix('an ')}s",
            lambda v: isinstance(v, list) and all(item.holds(i) for i in v),
        )
    if isinstance(field, models.BooleanField):
        return _BOOLEAN
    if isinstance(field, models.IntegerField):
        return _INTEGER
    if isinstance(field, models.FloatField):
        return _NUMBER
    if isinstance(field, models.CharField | models.TextField | models.DateTimeField):
        return _STRING
    if isinstance(field, models.JSONField):
        return _ANY
    raise TypeError(f"the export format has no JSON type for {field!r}")


def _check_datetime(value: datetime, label: str, line: int) -> None:
    """Postgres stores a time with its zone, in UTC: a time without an offset would be read in
    whatever zone the server runs in, and one outside years 1-9999 in UTC cannot be read back."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise FormatError(line, f"{label}: a date and time with its UTC offset (as the export writes it)")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise FormatError(line, f"{label}: outside the years 1-9999 in UTC") from None


def json_kind(value: Any) -> str:
    """How a message names a JSON value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def public_id(value: Any, line: int, what: str = "id") -> str:
    if not isinstance(value, str) or not _PUBLIC_ID.fullmatch(value):
        raise FormatError(line, f"{what} is not a public id (26 characters of Crockford base32)")
    return value.upper()


def link_kind(value: Any, line: int) -> str:
    if value not in LinkKind.values:
        raise FormatError(line, f"link kind must be one of {LinkKind.values}")
    return str(value)
