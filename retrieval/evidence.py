"""Which turns an answer shows: chosen across all its hits by each turn's own relevance, within a
budget of tokens (docs/decisions/0039-evidence-within-a-budget.md).

A search ranks episodes, but an agent reads turns. Every matched turn of every hit is a candidate
at its own fused score (``Hit.matched``) times the lift its episode got from the ranking (priority,
state, the time the query names: ``Hit.score / Hit.relevance``). A matched turn also puts its
neighbours forward at a share of its score, its reply at a larger one when it asks a question (the
answer is often the turn after it, and the evidence the turn before a matched reply). The
candidates of all hits are taken best first while they fit: a hit far down the answer may show
nothing (giving each hit its best turn first spent the budget on hits that rarely hold the
evidence). Then the packed hits' shapes (key points, headlines) frame their turns while tokens
remain. The same choice serves ``POST /search`` (a hit's turns) and ``POST /context`` (its evidence
section), whatever the hit's layer: a packed episode's chosen turns are read from Postgres.

Everything here is pure: the caller reads the turns (with their lengths) and the texts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from episodes.models import Layer
from memory_platform.conf import memory_settings

#: A neighbour of a matched turn stands at this share of its score; the reply to a matched question
#: at ``REPLY_SHARE``. Chosen so that a question's answer, often the turn after it, is shown (docs/decisions/0039).
NEIGHBOUR_SHARE = 0.5
REPLY_SHARE = 0.8
#: A turn's similarity to the query counts to this power: it separates the turn that says it from
#: the turns that share the topic.
SHARPNESS = 0.5
#: What a shown turn costs besides its text: its role, the separator and the line break.
TURN_OVERHEAD_TOKENS = 3


def estimate_tokens(text: str) -> int:
    """About four characters a token (English with GPT-style and WordPiece tokenizers alike):
    enough to keep to a budget without a tokenizer on the read path."""
    return _tokens(len(text))


def _tokens(chars: int) -> int:
    return max(1, math.ceil(chars / 4))


class Candidate(Protocol):
    """What the choice reads of a hit (``retrieval.services.Hit``)."""

    @property
    def relevance(self) -> float: ...
    @property
    def score(self) -> float: ...
    @property
    def matched(self) -> list[tuple[int, float]]: ...


class TurnCost(Protocol):
    """What the choice reads of a turn (``episodes.stores.rows.TurnRow``)."""

    @property
    def pk(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def chars(self) -> int: ...


@dataclass(frozen=True)
class Budget:
    """How much an answer shows: ``tokens`` of turns across its hits (``estimate_tokens``), and how
    many ``neighbours`` on each side a matched turn puts forward."""

    tokens: int
    neighbours: int = 1

    @classmethod
    def default(cls) -> Budget:
        return cls(
            tokens=int(memory_settings.SEARCH_MAX_TOKENS),
            neighbours=int(memory_settings.SNIPPET_NEIGHBOURS),
        )


def turn_tokens(turn: TurnCost) -> int:
    """What showing ``turn`` costs (its text may not be read yet: its length is)."""
    return _tokens(turn.chars or len(turn.text)) + TURN_OVERHEAD_TOKENS


def _asks(turn: TurnCost) -> bool:
    return turn.text.rstrip().endswith(("?", "？"))


def candidates(
    hit: Candidate, turns: Sequence[Any], neighbours: int, similarity: Mapping[int, float] | None = None
) -> dict[int, float]:
    """Position in ``turns`` -> the score that puts it forward, for one hit: each matched turn at
    its fused score times the hit's lift and, with ``similarity`` (turn id -> cosine to the query
    vector), times its similarity to the power ``SHARPNESS`` (a rank fusion is flat within one
    episode: a turn that only shares the topic stands next to the one that says it)."""
    if not turns:
        return {}
    lift = hit.score / hit.relevance if hit.relevance else 1.0
    position = {t.pk: i for i, t in enumerate(turns)}
    out: dict[int, float] = {}

    def put(i: int, score: float) -> None:
        if 0 <= i < len(turns) and score > out.get(i, 0.0):
            out[i] = score

    own = [
        (position[pk], s * lift * (max(similarity.get(pk, 0.0), 0.01) ** SHARPNESS if similarity else 1.0))
        for pk, s in hit.matched
        if pk in position
    ]
    for i, score in own:
        put(i, score)
    for i, score in own:
        for step in range(1, neighbours + 1):
            share = NEIGHBOUR_SHARE**step
            put(i - step, score * share)
            after = REPLY_SHARE if step == 1 and _asks(turns[i]) else share
            put(i + step, score * after)
    if not own:
        # Found by its shape, its centroid or a hop: its first turns stand for it.
        base = hit.score or hit.relevance
        for i in range(min(len(turns), 1 + 2 * neighbours)):
            put(i, base * NEIGHBOUR_SHARE ** (i + 1))
    return out


def packed_framing(hits: Sequence[Any], left: int, text: Callable[[Any], str]) -> set[int]:
    """The packed hits (``hit.episode`` warm or cold) whose shape, ``text(episode)``, still fits in
    ``left`` tokens after their turns were chosen, in the answer's order: their episode ids."""
    framed: set[int] = set()
    for hit in hits:
        cost = estimate_tokens(text(hit.episode)) + 1
        if hit.episode.layer != Layer.HOT and cost <= left:
            framed.add(hit.episode.pk)
            left -= cost
    return framed


def choose(
    hits: Sequence[Candidate],
    turns: Sequence[Sequence[Any]],
    budget: Budget,
    *,
    spent: int = 0,
    similarity: Mapping[int, float] | None = None,
) -> list[list[int]]:
    """Per hit, the positions in its ``turns`` to show, in the episode's order. ``spent``: tokens
    the answer already holds (packed shapes, framing); ``similarity``: turn id -> cosine to the
    query vector, when there is one (``candidates``)."""
    left = budget.tokens - spent
    scored = [
        candidates(hit, rows, budget.neighbours, similarity) for hit, rows in zip(hits, turns, strict=True)
    ]
    chosen: list[set[int]] = [set() for _ in hits]

    def take(h: int, i: int) -> bool:
        nonlocal left
        cost = turn_tokens(turns[h][i])
        if i in chosen[h] or cost > left:
            return False
        chosen[h].add(i)
        left -= cost
        return True

    rest = sorted((-s, h, i) for h, scores in enumerate(scored) for i, s in scores.items())
    for _, h, i in rest:
        take(h, i)
    return [sorted(positions) for positions in chosen]
