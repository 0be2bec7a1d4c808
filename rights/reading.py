"""Reading an import's body and checking every line of it, before anything is written: a bad
line is a ``FormatError`` naming it and its field. What any line must be (UTF-8 text, a JSON value
no deeper than ``MAX_JSON_DEPTH``, without NUL characters, with finite numbers) is ``json_lines``
and ``load_json``, for all three formats; what an export's records hold is ``parse_export``."""

from __future__ import annotations

import codecs
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from rest_framework.exceptions import ParseError

from episodes.models import SEARCH_TEXT_LIMIT, Episode, Layer, Link, Turn
from lifecycle.models import AccessWindow, JournalEntry
from lifecycle.policy_json import PolicySerializer
from memory_platform.api.parsers import check_value
from memory_platform.conf import DEFAULTS, memory_settings

from . import records
from .records import FormatError, json_kind


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
    policy_line: int = 0
    episodes: list[EpisodeIn] = field(default_factory=list)
    links: list[tuple[str, str, str, datetime | None]] = field(default_factory=list)
    journal: list[tuple[str | None, dict[str, Any]]] = field(default_factory=list)
    counters: dict[str, str] | None = None


_EPISODE_KEYS = frozenset({"type", "id", "embedding", "access_window", *records.EPISODE_FIELDS})
_TURN_KEYS = frozenset({"type", "id", "episode", "embedding", "context_embedding", *records.TURN_FIELDS})


class NotJSON(FormatError):
    """Text that is no JSON value at all (rather than JSON this platform refuses)."""


#: What a body in UTF-16 or UTF-32 begins with, or holds between its ASCII characters.
_WIDE_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def decode(raw: bytes | str, line: int) -> str:
    """A line of the body as text: UTF-8 (a byte order mark before the first line is allowed)."""
    if isinstance(raw, str):
        return raw
    if line == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    if b"\x00" in raw or (line == 1 and raw.startswith(_WIDE_BOMS)):
        raise FormatError(line, "NUL bytes or a UTF-16/UTF-32 byte order mark: an import is UTF-8 text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(
            line, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
        ) from None


def load_json(text: str, line: int) -> Any:
    """The JSON value of ``text`` (a line, or a JSON document that begins on ``line``), as deep,
    without NUL characters or lone surrogates and with finite numbers (the API's own rules:
    ``check_value``); NotJSON when it is no JSON, else FormatError."""
    depth = int(memory_settings.MAX_JSON_DEPTH)
    try:
        value = json.loads(text)
    except RecursionError:
        raise FormatError(line, f"JSON nests deeper than {depth} levels") from None
    except json.JSONDecodeError as exc:
        where = f" on its line {exc.lineno}" if exc.lineno > 1 else ""
        raise NotJSON(line, f"not JSON: {exc.msg} at column {exc.colno}{where}") from None
    except ValueError as exc:  # an integer of thousands of digits
        raise FormatError(line, f"a number too long to read ({exc})") from None
    try:
        check_value(value, depth)
    except ParseError as exc:
        raise FormatError(line, str(exc.detail)) from None
    return value


def json_lines(lines: Iterable[bytes | str]) -> Iterable[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line; FormatError for one that is not an object."""
    for number, raw in enumerate(lines, start=1):
        text = decode(raw, number)
        if not text.strip():
            continue
        value = load_json(text, number)
        if not isinstance(value, dict):
            raise FormatError(number, f"a line is a JSON object, not {json_kind(value)}")
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
            data.policy, data.policy_line = _policy(number, record), number
        elif kind == "counters":
            data.counters = _counters(number, record)
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


def _policy(number: int, record: dict[str, Any]) -> dict[str, Any]:
    """The exported policy's values, each by the API's own rules (``imports`` checks them again
    against the target's policy, the rules between fields included)."""
    policy = record.get("policy")
    if not isinstance(policy, dict):
        raise FormatError(number, f"policy: an object, not {json_kind(policy)}")
    # Neither is taken: the time is the target's own, and no secret travels in an export.
    given = {k: v for k, v in policy.items() if k not in {"updated_at", "llm_api_key"}}
    serializer = PolicySerializer(data=given, partial=True)
    if not serializer.is_valid():
        raise FormatError(number, f"policy: {json.dumps(serializer.errors, ensure_ascii=False)}")
    return given


#: A counter's value: a number Redis adds exactly (counts are whole; ``_sum`` fields are not).
_COUNTER_LIMIT = 2**53


def _counters(number: int, record: dict[str, Any]) -> dict[str, str]:
    """The tenant's counters as ``memory_platform.counters.fields_of`` reads them: names to numbers
    (written as Redis keeps them, strings of decimals)."""
    fields = record.get("fields")
    if not isinstance(fields, dict):
        raise FormatError(number, f"fields: an object of counter names to numbers, not {json_kind(fields)}")
    out = {}
    for name, value in fields.items():
        try:
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise TypeError
            amount = float(value)
        except (TypeError, ValueError, OverflowError):
            raise FormatError(number, f"fields.{name}: a number, not {json_kind(value)}") from None
        if not math.isfinite(amount) or abs(amount) >= _COUNTER_LIMIT:
            raise FormatError(number, f"fields.{name}: {value} is out of range (a counter is below 2**53)")
        out[name] = str(value)
    return out


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
    if len(fields.get("search_text", "")) > SEARCH_TEXT_LIMIT:
        raise FormatError(number, f"search_text: at most {SEARCH_TEXT_LIMIT} characters")
    window = record.get("access_window")
    if window is not None:
        if not isinstance(window, dict):
            raise FormatError(
                number,
                f"access_window: an object (started_at, access_count_at_start) or null, not {json_kind(window)}",
            )
        window = records.clean_fields(
            AccessWindow, ("started_at", "access_count_at_start"), window, number, within="access_window"
        )
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
    fields = records.clean_fields(Turn, records.TURN_FIELDS, record, number)
    limit = int(memory_settings.MAX_TURN_CHARS)
    if len(fields["text"]) > limit:
        raise FormatError(number, f"text: at most {limit} characters (MEMORY_MAX_TURN_CHARS)")
    return TurnIn(
        public_id=records.public_id(record.get("id"), number),
        fields=fields,
        vector=records.decode_vector(record.get("embedding"), dim, number),
        context_vector=records.decode_vector(record.get("context_embedding"), dim, number),
    )


def _link(number: int, record: dict[str, Any]) -> tuple[str, str, str, datetime | None]:
    src = records.public_id(record.get("src"), number, "src")
    dst = records.public_id(record.get("dst"), number, "dst")
    if src == dst:
        raise FormatError(number, "dst: the same episode as src (a link joins two)")
    return (
        src,
        dst,
        records.link_kind(record.get("kind"), number),
        records.clean_fields(Link, ("created_at",), record, number).get("created_at"),
    )


def _journal(number: int, record: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    episode = record.get("episode")
    owner = None if episode is None else records.public_id(episode, number, "episode")
    fields = records.clean_fields(JournalEntry, records.JOURNAL_FIELDS, record, number)
    if not isinstance(fields.get("before", {}), dict) or not isinstance(fields.get("after", {}), dict):
        raise FormatError(number, "a journal entry's before and after are objects")
    # An entry already imported is known by its episode, action, time and actor: each is needed.
    if "created_at" not in fields:
        raise FormatError(number, "journal record without 'created_at'")
    fields.setdefault("actor", "")
    return owner, fields
