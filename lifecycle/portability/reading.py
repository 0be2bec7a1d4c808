"""Reading an export (``records``) and checking every line of it, before anything is written:
a bad line is a ``FormatError`` naming it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from rest_framework.exceptions import ParseError

from episodes.models import Episode, Layer, Link, Turn
from memory_platform.api.parsers import check_value
from memory_platform.conf import DEFAULTS, memory_settings

from ..models import AccessWindow, JournalEntry
from . import records
from .records import FormatError


@dataclass
class EpisodeIn:
    public_id: str
    fields: dict[str, Any]
    vector: np.ndarray | None
    window: dict[str, Any] | None
    turns: list[TurnIn] = field(default_factory=list)


@dataclass
class TurnIn:
    public_id: str
    fields: dict[str, Any]
    vector: np.ndarray | None
    context_vector: np.ndarray | None


@dataclass
class ExportIn:
    """An export read and checked, nothing written yet."""

    header: dict[str, Any]
    policy: dict[str, Any] | None = None
    episodes: list[EpisodeIn] = field(default_factory=list)
    links: list[tuple[str, str, str, datetime | None]] = field(default_factory=list)
    journal: list[tuple[str | None, dict[str, Any]]] = field(default_factory=list)
    counters: dict[str, str] | None = None


_EPISODE_KEYS = frozenset({"type", "id", "embedding", "access_window", *records.EPISODE_FIELDS})
_TURN_KEYS = frozenset({"type", "id", "episode", "embedding", "context_embedding", *records.TURN_FIELDS})


def json_lines(lines: Iterable[bytes | str]) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line; FormatError for one that is not an object."""
    for number, raw in enumerate(lines, start=1):
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        try:
            value = json.loads(text)
            check_value(value, int(memory_settings.MAX_JSON_DEPTH))
        except (ValueError, RecursionError):
            raise FormatError(number, "not a JSON value") from None
        except ParseError as exc:
            raise FormatError(number, str(exc.detail)) from None
        if not isinstance(value, dict):
            raise FormatError(number, "a line is a JSON object")
        yield number, value


def _header(number: int, record: dict[str, Any]) -> tuple[dict[str, Any], int]:
    if record.get("format") != records.FORMAT:
        raise FormatError(number, f"the first line is the header, with format {records.FORMAT!r}")
    if record.get("version") != records.VERSION:
        raise FormatError(
            number, f"version {record.get('version')!r}: this platform reads version {records.VERSION}"
        )
    embedding = record.get("embedding")
    width = int(DEFAULTS["EMBEDDING_DIM"])
    if (
        not isinstance(embedding, dict)
        or not isinstance(embedding.get("model"), str)
        or not isinstance(embedding.get("dim"), int)
        or not 1 <= embedding["dim"] <= width
        or embedding.get("encoding") != records.ENCODING
    ):
        raise FormatError(
            number,
            f"the header's embedding names the model, its dim (1-{width}) and encoding {records.ENCODING!r}",
        )
    return record, embedding["dim"]


def parse_export(lines: Iterable[bytes | str]) -> ExportIn:
    """Read a whole export and check every line against the format; raises FormatError."""
    data: ExportIn | None = None
    dim = 0
    seen_turns: set[str] = set()
    by_id: dict[str, EpisodeIn] = {}
    counts: Counter[str] = Counter()
    ended = False
    for number, record in json_lines(lines):
        if data is None:
            header, dim = _header(number, record)
            data = ExportIn(header=header)
            continue
        if ended:
            raise FormatError(number, "a record after the end record")
        kind = record.get("type")
        if kind not in records.RECORD_TYPES:
            raise FormatError(number, f"unknown record type {kind!r}; one of {list(records.RECORD_TYPES)}")
        if kind == "episode":
            episode = _episode(number, record, dim)
            if episode.public_id in by_id:
                raise FormatError(number, f"episode {episode.public_id} twice")
            by_id[episode.public_id] = episode
            data.episodes.append(episode)
        elif kind == "turn":
            owner = records.public_id(record.get("episode"), number, "episode")
            if owner not in by_id:
                raise FormatError(number, f"turn of episode {owner}, which no earlier line holds")
            turn = _turn(number, record, dim)
            if turn.public_id in seen_turns:
                raise FormatError(number, f"turn {turn.public_id} twice")
            seen_turns.add(turn.public_id)
            by_id[owner].turns.append(turn)
        elif kind == "link":
            data.links.append(_link(number, record))
        elif kind == "journal":
            data.journal.append(_journal(number, record))
        elif kind == "policy":
            if not isinstance(record.get("policy"), dict):
                raise FormatError(number, "a policy record holds an object 'policy'")
            data.policy = record["policy"]
        elif kind == "counters":
            fields = record.get("fields")
            if not isinstance(fields, dict) or not all(
                isinstance(k, str) and isinstance(v, str | int | float) for k, v in fields.items()
            ):
                raise FormatError(number, "a counters record holds 'fields', names to numbers")
            data.counters = {k: str(v) for k, v in fields.items()}
        else:
            _check_end(number, record, counts)
            ended = True
        if kind != "end":
            counts[kind] += 1
    if data is None:
        raise FormatError(1, "empty: an export begins with its header line")
    if not ended:
        raise FormatError(0, "no end record: the export was cut short")
    return data


def _check_end(number: int, record: dict[str, Any], counts: Counter[str]) -> None:
    said = record.get("counts")
    if not isinstance(said, dict) or {k: v for k, v in said.items() if v} != dict(+counts):
        raise FormatError(
            number, f"the end record counts {said}, the file holds {dict(+counts)}: cut or edited"
        )


def _episode(number: int, record: dict[str, Any], dim: int) -> EpisodeIn:
    unknown = set(record) - _EPISODE_KEYS
    if unknown:
        raise FormatError(number, f"unknown episode fields {sorted(unknown)}")
    fields = records.clean_fields(Episode, records.EPISODE_FIELDS, record, number)
    if fields.get("anchor") and fields.get("layer") == Layer.COLD:
        raise FormatError(number, "an anchor is never cold")
    if fields["last_occurred_at"] < fields["first_occurred_at"]:
        raise FormatError(number, "last_occurred_at is before first_occurred_at")
    window = record.get("access_window")
    if window is not None:
        window = records.clean_fields(AccessWindow, ("started_at", "access_count_at_start"), window, number)
    return EpisodeIn(
        public_id=records.public_id(record.get("id"), number),
        fields=fields,
        vector=records.decode_vector(record.get("embedding"), dim, number),
        window=window,
    )


def _turn(number: int, record: dict[str, Any], dim: int) -> TurnIn:
    unknown = set(record) - _TURN_KEYS
    if unknown:
        raise FormatError(number, f"unknown turn fields {sorted(unknown)}")
    return TurnIn(
        public_id=records.public_id(record.get("id"), number),
        fields=records.clean_fields(Turn, records.TURN_FIELDS, record, number),
        vector=records.decode_vector(record.get("embedding"), dim, number),
        context_vector=records.decode_vector(record.get("context_embedding"), dim, number),
    )


def _link(number: int, record: dict[str, Any]) -> tuple[str, str, str, datetime | None]:
    return (
        records.public_id(record.get("src"), number, "src"),
        records.public_id(record.get("dst"), number, "dst"),
        records.link_kind(record.get("kind"), number),
        records.clean_fields(Link, ("created_at",), record, number).get("created_at"),
    )


def _journal(number: int, record: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    episode = record.get("episode")
    owner = None if episode is None else records.public_id(episode, number, "episode")
    fields = records.clean_fields(JournalEntry, records.JOURNAL_FIELDS, record, number)
    if not isinstance(fields.get("before", {}), dict) or not isinstance(fields.get("after", {}), dict):
        raise FormatError(number, "a journal entry's before and after are objects")
    return owner, fields
