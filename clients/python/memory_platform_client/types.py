"""What the client sends and gets back. Every result keeps the platform's whole answer in ``raw``.

The answers are ``TypedDict`` s named after the OpenAPI schema's components with ``Json`` added
(``CompactHitJson`` is the schema's ``CompactHit``): their keys, and which of them are always
there, are checked against the server's schema by tests/clients/test_client_types.py. A key that
is not always there is in the ``total=False`` half of its type.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, TypedDict, final

# --- the answers, as the schema declares them -----------------------------------------------------


class TurnWrittenJson(TypedDict):
    id: str
    episode_id: str
    seq: int


class TurnsWrittenJson(TypedDict):
    turns: list[TurnWrittenJson]
    episode_ids: list[str]
    searchable: bool
    queued: bool
    reason: str | None
    pending: int | None


class MemoryScopeJson(TypedDict):
    user_id: str
    agent_id: str
    session_id: str


class MemoryTurnJson(TypedDict):
    id: str
    seq: int
    role: str
    text: str
    language: str
    occurred_at: str | None
    metadata: dict[str, Any]


class MemoryCountersJson(TypedDict):
    access_count: int
    traverse_count: int
    in_degree: int
    out_degree: int
    last_accessed_at: str | None
    last_linked_at: str | None


class LinkEndJson(TypedDict):
    episode_id: str
    kind: str


MemoryLinksJson = TypedDict("MemoryLinksJson", {"out": list[LinkEndJson], "in": list[LinkEndJson]})


class _CompactHit(TypedDict):
    episode_id: str
    layer: str
    score: float
    date: str
    text: str


class HopExplainJson(TypedDict):
    via: str
    name: str


class ExplainJson(TypedDict, total=False):
    """How a hit was ranked (``explain=True``): where the lists found it, then what the ranking
    made of it."""

    source: str
    best_turn_id: str | None
    vector_rank: int | None
    text_rank: int | None
    rrf: float
    hop: HopExplainJson
    recency: float
    frequency: float
    anchor: float
    relevance: float
    priority: float
    state: float
    time: float
    supersedes: float
    score: float


@final
class CompactHitJson(_CompactHit, total=False):
    """A hit in the compact view (the default): its ``text`` is what the platform chose to show."""

    state: str
    similarity: float
    explain: ExplainJson


class _Hit(TypedDict):
    episode_id: str
    layer: str
    kind: str
    title: str
    score: float
    anchor: bool
    state: str
    scope: MemoryScopeJson
    first_occurred_at: str | None
    last_occurred_at: str | None
    entities: list[str]
    decisions: list[str]
    turn_count: int
    unpack: str


@final
class HitJson(_Hit, total=False):
    """A hit in the full view (``view="full"``): its layer's shape, no ``text``."""

    turns: list[MemoryTurnJson]
    summary: str
    key_points: list[str]
    partial: bool
    headline: str
    tags: list[str]
    index_only: bool
    turn_ids: list[str]
    snippet: bool
    expand: str
    matched_turn_ids: list[str]
    similarity: float
    explain: ExplainJson


class SearchExplainJson(TypedDict):
    query_narrowed: str | None


class _SearchAnswer(TypedDict):
    results: list[CompactHitJson | HitJson]
    degraded: bool
    degraded_reason: str | None
    stale: bool
    took_ms: float


class SearchAnswerJson(_SearchAnswer, total=False):
    explain: SearchExplainJson


class _ActivationAnswer(TypedDict):
    results: list[HitJson]
    degraded: bool


class ActivationAnswerJson(_ActivationAnswer, total=False):
    degraded_reason: str | None
    stale: bool
    took_ms: float


class MemoryItemJson(TypedDict):
    id: str
    kind: str
    title: str
    layer: str
    state: str
    anchor: bool
    tags: list[str]
    metadata: dict[str, Any]
    scope: MemoryScopeJson
    first_occurred_at: str | None
    last_occurred_at: str | None
    turn_count: int
    counters: MemoryCountersJson
    restored_at: str | None
    forgotten_at: str | None


class _MemoryBody(MemoryItemJson):
    entities: list[str]
    decisions: list[str]
    links: MemoryLinksJson


class HotMemoryJson(_MemoryBody):
    turns: list[MemoryTurnJson]


class _WarmMemory(_MemoryBody):
    summary: str
    key_points: list[str]
    partial: bool


class WarmMemoryJson(_WarmMemory, total=False):
    turns: list[MemoryTurnJson]


class _ColdMemory(_MemoryBody):
    headline: str
    index_only: bool


class ColdMemoryJson(_ColdMemory, total=False):
    turns: list[MemoryTurnJson]


class UnpackedMemoryJson(HotMemoryJson):
    unpacked_from: str


#: A memory in its layer's shape.
MemoryJson = HotMemoryJson | WarmMemoryJson | ColdMemoryJson


class MemoryPageJson(TypedDict):
    results: list[MemoryItemJson]
    next_cursor: str | None


class _ContextItem(TypedDict):
    episode_id: str
    layer: str
    text: str


class ContextItemJson(_ContextItem, total=False):
    score: float


class ContextSectionsJson(TypedDict):
    anchors: list[ContextItemJson]
    session: list[ContextItemJson]
    relevant: list[ContextItemJson]
    linked: list[ContextItemJson]


class ContextAnswerJson(TypedDict):
    sections: ContextSectionsJson
    text: str
    tokens: int
    max_tokens: int
    degraded: bool
    degraded_reason: str | None


class FeedbackCountsJson(TypedDict):
    used: int
    unused: int


class ForgottenJson(TypedDict):
    id: str
    state: str
    forgotten_at: str | None


class PinnedJson(TypedDict):
    id: str
    anchor: bool
    layer: str


class LinkMadeJson(TypedDict):
    source_id: str
    target_id: str
    kind: str
    created: bool


class LinksRemovedJson(TypedDict):
    deleted: int


class WhoAmIJson(TypedDict):
    tenant: str
    tenant_id: str
    key_prefix: str
    scopes: list[str]


class TenantStatsJson(TypedDict):
    tenant: str
    at: str
    episodes: dict[str, dict[str, int]]
    episodes_total: int
    turns: dict[str, int]
    raw_chars: dict[str, int]
    bytes: dict[str, int]
    compression: dict[str, float | None]
    candidates_pending: dict[str, int]
    ticks: dict[str, Any]
    counters: dict[str, Any]
    last_24h: dict[str, Any] | None


class PolicyPreviewJson(TypedDict):
    now: str
    counts: dict[str, int]
    scored: int
    errors: list[dict[str, Any]]
    samples: dict[str, list[dict[str, Any]]]
    fields: list[str]


class ImportSummaryJson(TypedDict):
    format: str
    episodes: dict[str, int]
    turns: dict[str, int]
    links: dict[str, int]
    journal: dict[str, int]
    vectors: str
    policy: str
    counters: str
    indexed: int
    notes: list[str]


class ErasureConfirmJson(TypedDict):
    confirm: str
    expires_in_seconds: int
    will_erase: dict[str, int]


class ErasureReceiptJson(TypedDict):
    erased: str
    erased_at: str
    removed: dict[str, dict[str, int]]
    verification: dict[str, Any]


class SoftForgottenJson(TypedDict):
    dry_run: bool
    count: int
    ids: list[str]


class CandidateMemoryJson(TypedDict):
    id: str
    title: str
    text: str
    layer: str
    state: str
    user_id: str
    agent_id: str
    session_id: str
    last_occurred_at: str | None


class CandidateReviewJson(TypedDict):
    """A merge or delete proposal, both memories side by side (``candidates``)."""

    id: str
    kind: str
    status: str
    score: float
    similarity: float | None
    created_at: str
    decided_at: str | None
    decided_by: str
    memory: CandidateMemoryJson
    other: CandidateMemoryJson | None


class CandidatePageJson(TypedDict):
    results: list[CandidateReviewJson]


# --- what the client sends, and reads the answers into --------------------------------------------


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
    #: Queued: the tenant's memories still waiting for a worker to index them.
    pending: int | None
    raw: TurnsWrittenJson = field(repr=False)

    @classmethod
    def from_json(cls, body: TurnsWrittenJson) -> TurnsWritten:
        return cls(
            turn_ids=[t["id"] for t in body["turns"]],
            episode_ids=list(body["episode_ids"]),
            searchable=body["searchable"],
            queued=body["queued"],
            reason=body["reason"],
            pending=body.get("pending"),
            raw=body,
        )


@dataclass
class Hit:
    """One memory a search found: its id, layer and score, and its text as an agent reads it.

    ``text`` is the platform's (a compact hit's, the default view); a hit of ``view="full"`` has
    none (None): its layer's parts (turns, summary, key points, headline) are in ``raw``."""

    episode_id: str
    layer: str
    score: float
    text: str | None
    date: str | None
    state: str
    raw: CompactHitJson | HitJson = field(repr=False)

    @classmethod
    def from_json(cls, body: CompactHitJson | HitJson) -> Hit:
        text, date = (body["text"], body["date"]) if "text" in body else (None, None)
        return cls(
            episode_id=body["episode_id"],
            layer=body["layer"],
            score=float(body["score"]),
            text=text,
            date=date,
            state=body.get("state", "active"),
            raw=body,
        )


@dataclass
class SearchResults:
    hits: list[Hit]
    degraded: bool
    stale: bool
    raw: SearchAnswerJson = field(repr=False)

    @classmethod
    def from_json(cls, body: SearchAnswerJson) -> SearchResults:
        return cls(
            hits=[Hit.from_json(h) for h in body["results"]],
            degraded=body["degraded"],
            stale=body["stale"],
            raw=body,
        )


@dataclass
class Memory:
    """One memory (an episode) in its layer's shape."""

    id: str
    layer: str
    state: str
    kind: str
    raw: MemoryJson | UnpackedMemoryJson | MemoryItemJson = field(repr=False)

    @classmethod
    def from_json(cls, body: MemoryJson | UnpackedMemoryJson | MemoryItemJson) -> Memory:
        return cls(id=body["id"], layer=body["layer"], state=body["state"], kind=body["kind"], raw=body)


@dataclass
class Page:
    memories: list[Memory]
    next_cursor: str | None
