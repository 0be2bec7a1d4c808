"""What the client sends and gets back. Every result keeps the platform's whole answer in ``raw``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class Turn:
    """One turn to append (``add_turns``): who said what, and when."""

    role: str
    text: str
    occurred_at: datetime | str | None = None
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    metadata: dict[str, Any] | None = None
    episode_boundary: bool = False
    vector: list[float] | None = None
    language: str | None = None

    def as_json(self) -> dict[str, Any]:
        body = {k: v for k, v in asdict(self).items() if v is not None and v is not False}
        if isinstance(self.occurred_at, datetime):
            body["occurred_at"] = self.occurred_at.isoformat()
        return body


@dataclass
class TurnsWritten:
    turn_ids: list[str]
    episode_ids: list[str]
    searchable: bool
    queued: bool
    reason: str | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TurnsWritten:
        return cls(
            turn_ids=[t["id"] for t in body.get("turns", [])],
            episode_ids=list(body.get("episode_ids", [])),
            searchable=bool(body.get("searchable")),
            queued=bool(body.get("queued")),
            reason=body.get("reason"),
            raw=body,
        )


@dataclass
class Hit:
    """One memory a search found: its id, layer and score, and its text as an agent reads it."""

    episode_id: str
    layer: str
    score: float
    text: str
    date: str | None
    state: str
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Hit:
        return cls(
            episode_id=body.get("episode_id") or body.get("id", ""),
            layer=body.get("layer", ""),
            score=float(body.get("score", 0.0)),
            text=body.get("text") or body.get("summary") or body.get("headline") or body.get("title", ""),
            date=body.get("date"),
            state=body.get("state", "active"),
            raw=body,
        )


@dataclass
class SearchResults:
    hits: list[Hit]
    degraded: bool
    stale: bool
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> SearchResults:
        return cls(
            hits=[Hit.from_json(h) for h in body.get("results", [])],
            degraded=bool(body.get("degraded")),
            stale=bool(body.get("stale")),
            raw=body,
        )


@dataclass
class Memory:
    """One memory (an episode) in its layer's shape."""

    id: str
    layer: str
    state: str
    kind: str
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Memory:
        return cls(
            id=body.get("id") or body.get("episode_id", ""),
            layer=body.get("layer", ""),
            state=body.get("state", ""),
            kind=body.get("kind", ""),
            raw=body,
        )


@dataclass
class Page:
    memories: list[Memory]
    next_cursor: str | None
