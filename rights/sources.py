"""Moving in: an import's body in one of three formats, told apart by its content.

- ``platform``: this platform's export (``records``), taken back by ``imports``;
- ``mem0``: mem0's memories — a JSON document (a list, or ``{"results": [...]}`` as its
  ``get_all`` answers, or ``{"memories": [...]}``) or JSON lines — each with ``id``, ``memory``
  (the text) and optionally ``user_id``, ``agent_id``, ``run_id`` (our ``session_id``),
  ``metadata``, ``categories`` (our tags), ``created_at``. Each becomes an explicit memory; its
  mem0 id is kept as ``metadata.mem0_id``, so importing it again writes nothing;
- ``turns``: JSON lines of turns as ``POST /turns`` takes them (``role``, ``text``, ``occurred_at``,
  ``user_id``, ``agent_id``, ``session_id``, ``metadata``, ``language``), plus an optional ``id``
  kept as ``metadata.import_id``. A turn already held (the same id, or the same owner, role, text
  and time) is not written again; a turn without an ``id`` needs ``occurred_at`` for that.

Every record is checked with the API's own serializers before anything is written.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from episodes.api import serializers as episode_serializers
from episodes.models import Episode, ForgottenUser, Turn
from episodes.services import MemoryInput, TurnInput
from lifecycle.services import memory_create, turns_ingest
from memory_platform.conf import memory_settings
from memory_platform.tenancy.audit import IMPORT, audit_record
from memory_platform.tenancy.models import Tenant

from . import records
from .imports import ImportReport, Progress, import_export
from .reading import NotJSON, decode, json_lines, load_json, parse_export
from .records import FormatError, json_kind

FORMATS = ("platform", "mem0", "turns")
EMPTY = "empty: an import is a platform export, mem0 memories or turns, as JSON lines"


def detect(body: bytes) -> str:
    """Which format ``body`` is in (FormatError when none), read off its first non-blank line."""
    number, text = 1, ""
    for number, raw in enumerate(body.splitlines(), start=1):
        text = decode(raw, number)
        if text.strip():
            break
    if not text.strip():
        raise FormatError(1, EMPTY)
    try:
        value = load_json(text, number)
    except NotJSON:
        value = None  # perhaps the first line of a JSON document over several lines
    if isinstance(value, dict):
        if value.get("format") == records.FORMAT:
            return "platform"
        if "memory" in value:
            return "mem0"
        if "text" in value and "role" in value:
            return "turns"
        if "results" in value or "memories" in value:
            return "mem0"
    if text.lstrip().startswith(("[", "{")):
        return "mem0"  # a JSON document over several lines: mem0's
    raise FormatError(
        number,
        "not an import this platform reads: a platform export (its header line), mem0 memories "
        "(objects with 'memory') or JSON lines of turns (objects with 'role' and 'text')",
    )


def import_body(
    *,
    tenant: Tenant,
    body: bytes,
    fmt: str | None,
    now: datetime,
    actor: str,
    progress: Progress | None = None,
) -> ImportReport:
    """Check the whole body, then write it into ``tenant``; audited. Raises FormatError first."""
    if not body.strip():
        raise FormatError(1, EMPTY)
    fmt = fmt or detect(body)
    if fmt == "platform":
        report = import_export(
            tenant=tenant, data=parse_export(body.splitlines()), now=now, actor=actor, progress=progress
        )
    elif fmt == "mem0":
        report = _import_memories(tenant, _mem0_memories(tenant, body), now, progress)
    elif fmt == "turns":
        report = _import_turns(tenant, _turn_lines(tenant, body), now, progress)
    else:
        raise FormatError(0, f"unknown format {fmt!r}; one of {list(FORMATS)}")
    audit_record(tenant=tenant, action=IMPORT, actor=actor, now=now, **report.as_json())
    return report


def _errors(serializer: Any) -> str:
    return json.dumps(serializer.errors, ensure_ascii=False)


def _source_id(value: Any, number: int, name: str, where: str | None = None) -> str:
    """The id a record had where it comes from, kept in its metadata: a string or an integer."""
    if isinstance(value, bool) or not isinstance(value, str | int) or not str(value).strip():
        raise FormatError(number, f"{name}: a string or an integer, not {json_kind(value)}", where=where)
    return str(value)


def _tagged(metadata: Any, key: str, source_id: str) -> Any:
    """``metadata`` with the source's id under ``key``. Anything but an object or null is left as it
    is, for the serializer's rule on metadata to refuse."""
    if metadata is None:
        return {key: source_id}
    if isinstance(metadata, dict):
        return {**metadata, key: source_id}
    return metadata


# --- mem0 -------------------------------------------------------------------------------------------
#: (line, where) of a memory: its line in JSON lines, its place in a JSON document.
Place = tuple[int, str | None]


def _mem0_records(body: bytes) -> list[tuple[Place, dict[str, Any]]]:
    lines = body.splitlines()
    try:
        document = load_json("\n".join(decode(raw, n) for n, raw in enumerate(lines, start=1)), 1)
    except NotJSON:
        document = None  # JSON lines
    if isinstance(document, dict) and not ("memory" in document and "id" in document):
        document = document.get("results", document.get("memories"))
    if isinstance(document, list):
        found: list[tuple[Place, dict[str, Any]]] = []
        for i, m in enumerate(document, start=1):
            where = f"memory {i} of the JSON document"
            if not isinstance(m, dict):
                raise FormatError(1, f"a mem0 memory is a JSON object, not {json_kind(m)}", where=where)
            found.append(((1, where), m))
    else:
        found = [((number, None), m) for number, m in json_lines(lines)]
    if not found:
        raise FormatError(1, "no mem0 memories in the body")
    return found


def _mem0_memories(tenant: Tenant, body: bytes) -> list[tuple[str, MemoryInput]]:
    memories = []
    for (number, where), m in _mem0_records(body):
        source_id = _source_id(m.get("id"), number, "id", where)
        tags = m.get("categories") or []
        payload = {
            "text": m.get("memory"),
            "user_id": m.get("user_id") or "",
            "agent_id": m.get("agent_id") or "",
            "session_id": m.get("run_id") or "",
            "tags": tags if isinstance(tags, list) else [tags],
            "metadata": _tagged(m.get("metadata"), "mem0_id", source_id),
        }
        if m.get("created_at"):
            payload["occurred_at"] = m["created_at"]
        serializer = episode_serializers.MemoryInSerializer(data=payload, context={"tenant": tenant})
        if not serializer.is_valid():
            raise FormatError(number, _errors(serializer), where=where)
        d = serializer.validated_data
        memories.append(
            (
                source_id,
                MemoryInput(
                    text=d["text"],
                    tags=tuple(d["tags"]),
                    metadata=d["metadata"],
                    scope=episode_serializers.owner_scope(d),
                    occurred_at=d.get("occurred_at"),
                ),
            )
        )
    return memories


def _import_memories(
    tenant: Tenant, memories: list[tuple[str, MemoryInput]], now: datetime, progress: Progress | None
) -> ImportReport:
    report = ImportReport(format="mem0", vectors="embedded by this tenant's embedder")
    held = set(
        Episode.objects.filter(tenant=tenant, metadata__mem0_id__in=[i for i, _ in memories]).values_list(
            "metadata__mem0_id", flat=True
        )
    )
    forgotten = set(ForgottenUser.among(tenant, (m.scope.user_id for _, m in memories)))
    for done, (source_id, memory) in enumerate(memories, start=1):
        if source_id in held:
            report.episodes["unchanged"] += 1
        elif memory.scope.user_id in forgotten:
            report.episodes["skipped"] += 1
        else:
            memory_create(tenant=tenant, memory=memory, now=now)
            held.add(source_id)
            report.episodes["created"] += 1
            report.turns["created"] += 1
        if progress is not None and (done % 100 == 0 or done == len(memories)):
            progress(done, len(memories), "memories")
    if report.episodes["skipped"]:
        report.note(f"{report.episodes['skipped']} memories of users erased from this tenant left out")
    return report


# --- turns ------------------------------------------------------------------------------------------
def _turn_lines(tenant: Tenant, body: bytes) -> list[TurnInput]:
    turns = []
    for number, record in json_lines(body.splitlines()):
        record = dict(record)
        source_id = record.pop("id", None)
        if source_id is not None:
            record["metadata"] = _tagged(
                record.get("metadata"), "import_id", _source_id(source_id, number, "id")
            )
        elif "occurred_at" not in record:
            raise FormatError(
                number, "a turn without 'id' needs 'occurred_at' (so importing it twice adds nothing)"
            )
        serializer = episode_serializers.TurnInSerializer(data=record, context={"tenant": tenant})
        if not serializer.is_valid():
            raise FormatError(number, _errors(serializer))
        t = serializer.validated_data
        if tenant.embedder == "provided" and t.get("vector") is None:
            raise FormatError(number, "this tenant uses caller-provided vectors: each turn needs 'vector'")
        turns.append(
            TurnInput(
                role=t["role"],
                text=t["text"],
                scope=episode_serializers.owner_scope(t),
                occurred_at=t.get("occurred_at"),
                metadata=t["metadata"],
                episode_boundary=t["episode_boundary"],
                vector=t.get("vector"),
                language=t.get("language", ""),
            )
        )
    if not turns:
        raise FormatError(1, "no turns in the body")
    return turns


def _turn_key(turn: TurnInput) -> tuple[Any, ...]:
    if "import_id" in turn.metadata:
        return ("id", turn.metadata["import_id"])
    s = turn.scope
    return (s.user_id, s.agent_id, s.session_id, turn.role, turn.text, turn.occurred_at)


def _held_turns(tenant: Tenant, turns: list[TurnInput]) -> set[tuple[Any, ...]]:
    ids = [t.metadata["import_id"] for t in turns if "import_id" in t.metadata]
    held: set[tuple[Any, ...]] = {
        ("id", i)
        for i in Turn.objects.filter(tenant=tenant, metadata__import_id__in=ids).values_list(
            "metadata__import_id", flat=True
        )
    }
    times = [t.occurred_at for t in turns if "import_id" not in t.metadata and t.occurred_at is not None]
    held.update(
        Turn.objects.filter(tenant=tenant, occurred_at__in=times).values_list(
            "user_id", "agent_id", "session_id", "role", "text", "occurred_at"
        )
    )
    return held


def _import_turns(
    tenant: Tenant, turns: list[TurnInput], now: datetime, progress: Progress | None
) -> ImportReport:
    report = ImportReport(format="turns", vectors="embedded by this tenant's embedder")
    forgotten = set(ForgottenUser.among(tenant, (t.scope.user_id for t in turns)))
    size = int(memory_settings.MAX_BATCH_TURNS)
    for start in range(0, len(turns), size):
        batch = turns[start : start + size]
        held = _held_turns(tenant, batch)
        fresh = []
        for turn in batch:
            key = _turn_key(turn)
            if turn.scope.user_id in forgotten:
                report.turns["skipped"] += 1
            elif key in held:
                report.turns["unchanged"] += 1
            else:
                held.add(key)
                fresh.append(turn)
        if fresh:
            result = turns_ingest(tenant=tenant, turns=fresh, now=now)
            report.turns["created"] += len(result.turns)
            report.episodes["written"] += len(result.episode_ids)
        if progress is not None:
            progress(min(start + size, len(turns)), len(turns), "turns")
    return report
