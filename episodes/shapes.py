"""What a hot, warm or cold episode looks like to a caller: as an API resource, as a search hit, and
as a line of a prompt (docs/concepts.md#layers: the older the layer, the less it shows).

- hot: its turns, whole;
- warm: its summary and key points, marked ``partial``;
- cold: its headline and tags (its own tags and the keywords packing found), marked ``index_only``.

Entities and decisions show in every layer (compression keeps them word for word). ``deep`` shows every turn whatever the
layer (the episode has been unpacked). Everything here is pure: the caller reads the rows.

Each shape is a ``TypedDict`` declared here, once: the API's output serializers and so the OpenAPI
schema are made from these declarations (``memory_platform.api.answers``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, NotRequired, TypedDict, TypeVar, cast

from typing_extensions import Doc

from .layers import Layer, State

if TYPE_CHECKING:
    from .models import Episode

ISO = Doc("ISO 8601")


class MemoryTurn(TypedDict):
    """A turn as a memory shows it."""

    id: str
    seq: Annotated[int, Doc("its position in its session")]
    role: str
    text: str
    language: str
    occurred_at: Annotated[str | None, Doc("when it was said (ISO 8601)")]
    metadata: dict[str, Any]


class MemoryScope(TypedDict):
    """Whose memory it is ("" where the writer named nobody)."""

    user_id: str
    agent_id: str
    session_id: str


class MemoryCounters(TypedDict):
    """How the memory was used: its accesses and traversals, and its links (derived, never stored)."""

    access_count: int
    traverse_count: int
    in_degree: int
    out_degree: int
    last_accessed_at: Annotated[str | None, ISO]
    last_linked_at: Annotated[str | None, ISO]


class MemoryItem(TypedDict):
    """A memory in a list (``GET /memories``): what every layer's shape shares, without content."""

    id: str
    kind: str
    title: str
    layer: Annotated[str, Layer]
    state: Annotated[str, State]
    anchor: Annotated[bool, Doc("pinned: never decays, never goes cold")]
    tags: list[str]
    metadata: dict[str, Any]
    scope: MemoryScope
    first_occurred_at: Annotated[str | None, ISO]
    last_occurred_at: Annotated[str | None, ISO]
    turn_count: int
    counters: MemoryCounters
    restored_at: Annotated[str | None, ISO]
    forgotten_at: Annotated[str | None, ISO]


class LinkEnd(TypedDict):
    episode_id: str
    kind: str


#: A memory's links, by direction (``in`` is a keyword, hence the functional form).
MemoryLinks = TypedDict("MemoryLinks", {"out": list[LinkEnd], "in": list[LinkEnd]})


class _MemoryBody(MemoryItem):
    entities: list[str]
    decisions: list[str]


class HotMemory(_MemoryBody):
    """A hot memory (``GET /memories/{id}``): its turns, whole."""

    turns: list[MemoryTurn]
    links: MemoryLinks


class WarmMemory(_MemoryBody):
    """A warm memory: its summary and key points (``partial``); its turns too when read deep."""

    turns: NotRequired[Annotated[list[MemoryTurn], Doc("read deep only")]]
    summary: str
    key_points: list[str]
    partial: Annotated[bool, Doc("not every turn shows (false when read deep)")]
    links: MemoryLinks


class ColdMemory(_MemoryBody):
    """A cold memory: its headline and tags (``index_only``); its turns too when read deep."""

    turns: NotRequired[Annotated[list[MemoryTurn], Doc("read deep only")]]
    headline: str
    index_only: Annotated[bool, Doc("only what the index keeps shows (false when read deep)")]
    links: MemoryLinks


#: One memory in its layer's shape. (A cold memory's ``tags`` are its own tags and the keywords
#: packing found: ``cold_tags``.)
Memory = HotMemory | WarmMemory | ColdMemory


class HopExplain(TypedDict):
    """How a hit reached by a hop was reached."""

    via: Annotated[str, Doc("entity, or link")]
    name: Annotated[str, Doc("the entity shared, or the link's kind")]


class Explain(TypedDict, total=False):
    """How a hit was ranked (``explain``: docs/concepts.md#how-a-search-is-ranked): where the lists
    found it and its fused score, then what the ranking made of it."""

    source: Annotated[str, Doc("hot, postgres, or hop (reached from another hit)")]
    best_turn_id: Annotated[int | str | None, Doc("its best turn (in an answer: that turn's id)")]
    vector_rank: Annotated[int | None, Doc("its best item's place in the vector list, from 1")]
    text_rank: Annotated[int | None, Doc("its best item's place in the full-text list, from 1")]
    rrf: Annotated[float, Doc("its relevance: its best item's weighted RRF score")]
    hop: HopExplain
    recency: Annotated[float, Doc("priority term")]
    frequency: Annotated[float, Doc("priority term")]
    anchor: Annotated[float, Doc("priority term")]
    relevance: Annotated[float, Doc("its relevance over the best candidate's, 0-1")]
    priority: Annotated[float, Doc("the priority, 0-1")]
    state: Annotated[float, Doc("its state's weight")]
    time: Annotated[float, Doc("the lift of the time the query names")]
    supersedes: Annotated[float, Doc("the lift that placed it above a memory it supersedes")]
    score: float


class Hit(TypedDict):
    """A search or activation hit in the full view (``view=full``): the memory's layer part (as in
    its memory's shape) with the turns the answer chose, and the paths to read or unpack it whole."""

    episode_id: str
    layer: Annotated[str, Layer]
    kind: str
    title: str
    score: float
    anchor: bool
    state: Annotated[str, State]
    scope: MemoryScope
    first_occurred_at: Annotated[str | None, ISO]
    last_occurred_at: Annotated[str | None, ISO]
    entities: list[str]
    decisions: list[str]
    turn_count: int
    unpack: Annotated[str, Doc("POST here to restore it whole, back to hot")]
    turns: NotRequired[Annotated[list[MemoryTurn], Doc("the turns shown (every turn with depth=deep)")]]
    summary: NotRequired[Annotated[str, Doc("warm")]]
    key_points: NotRequired[Annotated[list[str], Doc("warm")]]
    partial: NotRequired[Annotated[bool, Doc("warm")]]
    headline: NotRequired[Annotated[str, Doc("cold")]]
    tags: NotRequired[Annotated[list[str], Doc("cold: its own tags and the keywords packing found")]]
    index_only: NotRequired[Annotated[bool, Doc("cold")]]
    turn_ids: NotRequired[Annotated[list[str], Doc("depth=deep: every turn's id")]]
    snippet: NotRequired[Annotated[bool, Doc("some of its turns are left out (not with depth=deep)")]]
    expand: NotRequired[Annotated[str, Doc("hot: GET here to read it whole")]]
    matched_turn_ids: NotRequired[Annotated[list[str], Doc("the shown turns search matched, best first")]]
    similarity: NotRequired[Annotated[float, Doc("its best turn's cosine to the query (with min_score)")]]
    explain: NotRequired[Annotated[Explain, Doc("how it was ranked (with explain)")]]


class CompactHit(TypedDict):
    """A search hit as an agent reads it (``view=compact``, the default): its ``text`` is what the
    answer chose to show of it (``hit_text``)."""

    episode_id: str
    layer: Annotated[str, Layer]
    score: float
    date: Annotated[str, Doc("the day it began (YYYY-MM-DD)")]
    text: str
    state: NotRequired[Annotated[str, State, Doc("only when it is not active")]]
    similarity: NotRequired[Annotated[float, Doc("its best turn's cosine to the query (with min_score)")]]
    explain: NotRequired[Annotated[Explain, Doc("how it was ranked (with explain)")]]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def cold_tags(episode: Episode) -> list[str]:
    """A cold memory's ``tags``: the writer's, then the keywords packing found (stored apart, shown
    together: docs/concepts.md#the-cold-shape)."""
    return list(dict.fromkeys(list(episode.tags) + list(episode.keywords)))


def turn_body(turn: Any) -> MemoryTurn:
    return {
        "id": turn.public_id,
        "seq": turn.seq,
        "role": turn.role,
        "text": turn.text,
        "language": turn.language,
        "occurred_at": _iso(turn.occurred_at),
        "metadata": turn.metadata,
    }


def shows_turns(episode: Episode, *, deep: bool) -> bool:
    """Whether the shape holds the episode's turns (callers read them only then)."""
    return episode.layer == Layer.HOT or deep


class _LayerPart(TypedDict, total=False):
    """The keys of a shape that depend on its layer."""

    turns: list[MemoryTurn]
    summary: str
    key_points: list[str]
    partial: bool
    headline: str
    tags: list[str]
    index_only: bool


def layer_body(episode: Episode, turns: Sequence[Any], *, deep: bool) -> _LayerPart:
    """The part of an episode that depends on its layer (the one rule of this module)."""
    body: _LayerPart = {}
    if shows_turns(episode, deep=deep):
        body["turns"] = [turn_body(t) for t in turns]
    if episode.layer == Layer.WARM:
        body.update({"summary": episode.summary, "key_points": episode.key_points, "partial": not deep})
    elif episode.layer == Layer.COLD:
        body.update({"headline": episode.headline, "tags": cold_tags(episode), "index_only": not deep})
    return body


def scope_body(episode: Episode) -> MemoryScope:
    return {"user_id": episode.user_id, "agent_id": episode.agent_id, "session_id": episode.session_id}


def list_item(episode: Episode, degree: tuple[int, int] = (0, 0)) -> MemoryItem:
    """An episode in a list: what every shape shares, without its content."""
    return {
        "id": episode.public_id,
        "kind": episode.kind,
        "title": episode.title,
        "layer": episode.layer,
        "state": episode.state,
        "anchor": episode.anchor,
        "tags": episode.tags,
        "metadata": episode.metadata,
        "scope": scope_body(episode),
        "first_occurred_at": _iso(episode.first_occurred_at),
        "last_occurred_at": _iso(episode.last_occurred_at),
        "turn_count": episode.turn_count,
        "counters": {
            "access_count": episode.access_count,
            "traverse_count": episode.traverse_count,
            "in_degree": degree[0],
            "out_degree": degree[1],
            "last_accessed_at": _iso(episode.last_accessed_at),
            "last_linked_at": _iso(episode.last_linked_at),
        },
        "restored_at": _iso(episode.restored_at),
        "forgotten_at": _iso(episode.forgotten_at),
    }


class _Turns(TypedDict, total=False):
    turns: list[MemoryTurn]


def resource(
    episode: Episode,
    *,
    turns: Sequence[Any],
    degree: tuple[int, int],
    links: MemoryLinks,
    deep: bool = False,
) -> Memory:
    """``GET /memories/{id}``: the list item, entities and decisions, the layer's part, links."""
    item = list_item(episode, degree)
    entities, decisions = episode.entities, episode.decisions
    shown: _Turns = {"turns": [turn_body(t) for t in turns]} if shows_turns(episode, deep=deep) else {}
    if episode.layer == Layer.WARM:
        return {
            **item,
            "entities": entities,
            "decisions": decisions,
            **shown,
            "summary": episode.summary,
            "key_points": episode.key_points,
            "partial": not deep,
            "links": links,
        }
    if episode.layer == Layer.COLD:
        return {
            **item,
            "tags": cold_tags(episode),  # in the list item's place
            "entities": entities,
            "decisions": decisions,
            **shown,
            "headline": episode.headline,
            "index_only": not deep,
            "links": links,
        }
    hot: HotMemory = {
        **item,
        "entities": entities,
        "decisions": decisions,
        "turns": [turn_body(t) for t in turns],
        "links": links,
    }
    return hot


def hit(
    episode: Episode,
    *,
    score: float,
    turns: Sequence[Any],
    shown: Sequence[Any] | None,
    matched: Sequence[tuple[int, float]] = (),
    explain: Explain | None = None,
    similarity: float | None = None,
) -> Hit:
    """A search or activation result: the layer's part and its unpack handle. ``turns`` holds the
    episode's turns (their ids at least), ``shown`` the ones the answer chose to show, with their
    text (``retrieval.evidence``), ``matched`` the turns search matched (internal ids, best first).

    A hot episode shows its chosen turns, with its turn count and an ``expand`` handle that reads
    it whole; a warm or cold one its packed shape and its chosen turns. With ``shown`` None
    (``depth=deep``) every turn shows, with every turn's id (so a caller can tell what unpacking
    would bring back)."""
    body: Hit = {
        "episode_id": episode.public_id,
        "layer": episode.layer,
        "kind": episode.kind,
        "title": episode.title,
        "score": round(score, 6),
        "anchor": episode.anchor,
        "state": episode.state,
        "scope": scope_body(episode),
        "first_occurred_at": _iso(episode.first_occurred_at),
        "last_occurred_at": _iso(episode.last_occurred_at),
        "entities": episode.entities,
        "decisions": episode.decisions,
        "turn_count": episode.turn_count,
        "unpack": f"/api/v1/memories/{episode.public_id}/unpack",
    }
    if shown is None:
        body.update(layer_body(episode, turns, deep=True))
        body["turn_ids"] = [t.public_id for t in turns]
    elif episode.layer == Layer.HOT:
        body.update(layer_body(episode, shown, deep=False))
        body["snippet"] = len(shown) < len(turns)
        body["expand"] = f"/api/v1/memories/{episode.public_id}"
    else:
        body.update(layer_body(episode, turns, deep=False))
        if shown:
            body["turns"] = [turn_body(t) for t in shown]
        body["snippet"] = bool(shown) and len(shown) < len(turns)
    ids = {t.pk: t.public_id for t in (turns if shown is None else shown)}
    if matched and (episode.layer == Layer.HOT or ids.keys() & {t for t, _ in matched}):
        body["matched_turn_ids"] = [ids[t] for t, _ in matched if t in ids]
    return _with_scores(body, similarity, explain, turns)


_Scored = TypeVar("_Scored", Hit, CompactHit)


def _with_scores(
    body: _Scored, similarity: float | None, explain: Explain | None, turns: Sequence[Any]
) -> _Scored:
    """A hit's ``similarity`` (with ``min_score``) and ``explain`` parts, when asked for. Search
    explains a hit by its best turn's internal id; the answer names that turn by its public id
    (``turns`` holds every turn of the episode: docs/decisions/0014-public-ids.md)."""
    if similarity is not None:
        body["similarity"] = round(similarity, 6)
    if explain:
        shown = cast(Explain, {k: (round(v, 6) if isinstance(v, float) else v) for k, v in explain.items()})
        if shown.get("best_turn_id") is not None:
            ids = {t.pk: t.public_id for t in turns}
            shown["best_turn_id"] = ids.get(shown["best_turn_id"])
        body["explain"] = shown
    return body


def packed_text(episode: Episode) -> str:
    """What a warm episode says in one line (its key points, else its summary), or a cold one (its
    headline, else its title)."""
    if episode.layer == Layer.WARM:
        return "; ".join(episode.key_points) or episode.summary
    return episode.headline or episode.title


def turn_lines(turns: Sequence[Any], shown: Sequence[Any]) -> list[str]:
    """``shown`` (some of ``turns``, in order) one ``role: text`` line each, with a ``…`` line
    where turns are left out (before, between or after them)."""
    lines: list[str] = []
    previous = turns[0].seq - 1 if turns else 0
    for turn in shown:
        if turn.seq != previous + 1:
            lines.append("…")
        lines.append(f"{turn.role}: {turn.text}")
        previous = turn.seq
    if shown and turns and shown[-1].seq != turns[-1].seq:
        lines.append("…")
    return lines


def hit_text(
    episode: Episode, turns: Sequence[Any], shown: Sequence[Any] | None, *, framed: bool = True
) -> str:
    """The layer's text of a hit as one string: its chosen turns (``turn_lines``; every turn when
    ``shown`` is None), after a warm one's key points (or summary) or a cold one's headline when
    ``framed``."""
    if shown is None:
        return "\n".join(f"{t.role}: {t.text}" for t in turns)
    lines = turn_lines(turns, shown)
    if episode.layer != Layer.HOT and framed:
        lines.insert(0, packed_text(episode))
    return "\n".join(line for line in lines if line)


def compact_hit(
    episode: Episode,
    *,
    score: float,
    turns: Sequence[Any],
    shown: Sequence[Any] | None,
    framed: bool = True,
    explain: Explain | None = None,
    similarity: float | None = None,
) -> CompactHit:
    """A search hit as an agent reads it (``view=compact``, the default): which memory, in which
    layer, how good (three significant digits), when, and its text (``hit_text``); its state only
    when it is not active. Everything else (title, scope, entities, the turn count, each turn's id
    and metadata, the packed shape's parts, the paths) is in ``view=full``, and the whole memory at
    ``GET /api/v1/memories/{episode_id}``: a compact hit spends its tokens on what was said
    (docs/decisions/0063)."""
    body: CompactHit = {
        "episode_id": episode.public_id,
        "layer": episode.layer,
        "score": float(f"{score:.3g}"),
        "date": episode.first_occurred_at.date().isoformat(),
        "text": hit_text(episode, turns, shown, framed=framed),
    }
    if episode.state != State.ACTIVE:
        body["state"] = episode.state
    return _with_scores(body, similarity, explain, turns)


def prompt_line(episode: Episode, turns: Sequence[Any]) -> str:
    """One line of a prompt: the date, then the layer's text (a hot episode's turns, whole)."""
    when = episode.last_occurred_at.date().isoformat()
    if episode.layer == Layer.WARM:
        return f"[{when}] {episode.title}: {packed_text(episode)}"
    if episode.layer == Layer.COLD:
        return f"[{when}] {packed_text(episode)}"
    body = " ".join(f"{t.role}: {t.text}" for t in turns)
    return f"[{when}] {body}"
