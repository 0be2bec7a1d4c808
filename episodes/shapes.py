"""What a hot, warm or cold episode looks like to a caller: as an API resource, as a search hit, and
as a line of a prompt (docs/concepts.md#layers: the older the layer, the less it shows).

- hot: its turns, whole;
- warm: its summary and key points, marked ``partial``;
- cold: its headline and tags (its own tags and the keywords packing found), marked ``index_only``.

Entities and decisions show in every layer (compression keeps them word for word). ``deep`` shows every turn whatever the
layer (the episode has been unpacked). Everything here is pure: the caller reads the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .models import Episode, Layer, State


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def cold_tags(episode: Episode) -> list[str]:
    return list(dict.fromkeys(list(episode.tags) + list(episode.keywords)))


def turn_body(turn: Any) -> dict[str, Any]:
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


def layer_body(episode: Episode, turns: Sequence[Any], *, deep: bool) -> dict[str, Any]:
    """The part of an episode that depends on its layer (the one rule of this module)."""
    body: dict[str, Any] = {}
    if shows_turns(episode, deep=deep):
        body["turns"] = [turn_body(t) for t in turns]
    if episode.layer == Layer.WARM:
        body.update(summary=episode.summary, key_points=episode.key_points, partial=not deep)
    elif episode.layer == Layer.COLD:
        body.update(headline=episode.headline, tags=cold_tags(episode), index_only=not deep)
    return body


def scope_body(episode: Episode) -> dict[str, str]:
    return {"user_id": episode.user_id, "agent_id": episode.agent_id, "session_id": episode.session_id}


def list_item(episode: Episode, degree: tuple[int, int] = (0, 0)) -> dict[str, Any]:
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


def resource(
    episode: Episode,
    *,
    turns: Sequence[Any],
    degree: tuple[int, int],
    links: dict[str, list[dict[str, Any]]] | None,
    deep: bool = False,
) -> dict[str, Any]:
    """``GET /memories/{id}``: the list item, entities and decisions, the layer's part, links."""
    body = list_item(episode, degree)
    body["entities"] = episode.entities
    body["decisions"] = episode.decisions
    body.update(layer_body(episode, turns, deep=deep))
    if links is not None:
        body["links"] = links
    return body


def hit(
    episode: Episode,
    *,
    score: float,
    turns: Sequence[Any],
    shown: Sequence[Any] | None,
    matched: Sequence[tuple[int, float]] = (),
    explain: dict[str, Any] | None = None,
    similarity: float | None = None,
) -> dict[str, Any]:
    """A search or activation result: the layer's part and its unpack handle. ``turns`` holds the
    episode's turns (their ids at least), ``shown`` the ones the answer chose to show, with their
    text (``retrieval.evidence``), ``matched`` the turns search matched (internal ids, best first).

    A hot episode shows its chosen turns, with its turn count and an ``expand`` handle that reads
    it whole; a warm or cold one its packed shape and its chosen turns. With ``shown`` None
    (``depth=deep``) every turn shows, with every turn's id (so a caller can tell what unpacking
    would bring back)."""
    body: dict[str, Any] = {
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
        body["snippet"] = bool(shown)
    ids = {t.pk: t.public_id for t in (turns if shown is None else shown)}
    if matched and (episode.layer == Layer.HOT or ids.keys() & {t for t, _ in matched}):
        body["matched_turn_ids"] = [ids[t] for t, _ in matched if t in ids]
    return _with_scores(body, similarity, explain, turns)


def _with_scores(
    body: dict[str, Any], similarity: float | None, explain: dict[str, Any] | None, turns: Sequence[Any]
) -> dict[str, Any]:
    """A hit's ``similarity`` (with ``min_score``) and ``explain`` parts, when asked for. Search
    explains a hit by its best turn's internal id; the answer names that turn by its public id
    (``turns`` holds every turn of the episode: docs/decisions/0014-public-ids.md)."""
    if similarity is not None:
        body["similarity"] = round(similarity, 6)
    if explain:
        shown = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in explain.items()}
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
    explain: dict[str, Any] | None = None,
    similarity: float | None = None,
) -> dict[str, Any]:
    """A search hit as an agent reads it (``view=compact``, the default): which memory, in which
    layer, how good, when, how long, and its text (``hit_text``); its state only when it is not
    active. Everything else (title, scope, entities, each turn's id and metadata, the packed
    shape's parts, the paths) is in ``view=full``, and the whole memory at
    ``GET /api/v1/memories/{episode_id}``: a compact hit spends its tokens on what was said."""
    body: dict[str, Any] = {
        "episode_id": episode.public_id,
        "layer": episode.layer,
        "score": float(f"{score:.4g}"),
        "date": episode.first_occurred_at.date().isoformat(),
        "turn_count": episode.turn_count,
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
