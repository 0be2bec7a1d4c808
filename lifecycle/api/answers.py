"""The answers of the memory and turn writes, forgets, pins, links and the policy's preview, declared once
(``memory_platform.api.answers``); a memory itself is in its layer's shape (``episodes.shapes``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, TypedDict

from typing_extensions import Doc

from episodes.models import Layer, State
from episodes.shapes import Memory, MemoryItem
from memory_platform.api.answers import one_of

from ..services import TickPreview

#: A memory in its layer's shape, as a write, a read or a restore answers it.
MEMORY = one_of("Memory", *Memory.__args__)


class MemoryPage(TypedDict):
    """``GET /memories``: a page, newest first."""

    results: list[MemoryItem]
    next_cursor: Annotated[str | None, Doc("pass it as `cursor` for the next page; null on the last")]


class TurnWritten(TypedDict):
    id: str
    episode_id: str
    seq: int


class TurnsWritten(TypedDict):
    """``POST /turns``: the turns written, durable before the answer."""

    turns: list[TurnWritten]
    episode_ids: Annotated[list[str], Doc("the episodes the turns went to, in order")]
    searchable: Annotated[bool, Doc("indexed: a search now finds them")]
    queued: Annotated[bool, Doc("written, to be indexed in the background (async)")]
    reason: Annotated[str | None, Doc("why they are not searchable yet")]
    pending: Annotated[
        int | None,
        Doc(
            "queued: the tenant's memories still waiting for a worker to index them, these included "
            "(how far the background indexing is behind); null when the turns were indexed at once"
        ),
    ]


class Pinned(TypedDict):
    """``POST`` / ``DELETE /memories/{id}/anchor``."""

    id: str
    anchor: bool
    layer: Annotated[str, Layer]


class LinkMade(TypedDict):
    source_id: str
    target_id: str
    kind: str
    created: Annotated[bool, Doc("false when the link was there already")]


class LinksRemoved(TypedDict):
    deleted: Annotated[int, Doc("links removed")]


class PolicyPreview(TickPreview):
    """``POST /policy/preview``: what a tick now would do under the policy with the body's fields."""

    fields: Annotated[list[str], Doc("the policy's fields the body set")]


class Forgotten(TypedDict):
    """``DELETE /memories/{id}``: the memory, forgotten (restorable for the grace period)."""

    id: str
    state: Annotated[str, State]
    forgotten_at: datetime | None
