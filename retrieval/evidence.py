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

The question itself weighs the candidates whose text the caller read (``candidate_ids``): a turn
said by someone the question names, a turn that says the question's rarer words, and for a "when"
or "how long" question a turn that says a time or a duration, stand higher (``Clues``). A vector
and a rank fusion find the topic; these find, among the turns on it, the one that answers.

Everything here is pure: the caller reads the turns (with their lengths) and the texts.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from episodes.language import stopwords
from episodes.layers import Layer

#: A neighbour of a matched turn stands at this share of its score; the reply to a matched question
#: at ``REPLY_SHARE``. Chosen so that a question's answer, often the turn after it, is shown (docs/decisions/0039).
NEIGHBOUR_SHARE = 0.5
REPLY_SHARE = 0.8
#: A turn's similarity to the query counts to this power: it separates the turn that says it from
#: the turns that share the topic.
SHARPNESS = 0.5
#: What a shown turn costs besides its text: its role, the separator and the line break.
TURN_OVERHEAD_TOKENS = 3
#: A turn said by someone the question names stands this much higher (a question about a person is
#: answered by what that person said); a turn that says what a "when" or "how long" question asks
#: for (a time, a duration), ``ANSWER_LIFT`` higher (docs/decisions/0039).
SPEAKER_LIFT = 2.0
ANSWER_LIFT = 1.4
#: A turn that says the question's words stands up to 1 + ``COVERAGE_LIFT`` higher: by
#: 1 + COVERAGE_LIFT × c², where c is the share of the question's words it says, each word weighed
#: by how few of the candidates say it (a name every turn opens with weighs next to nothing; a word
#: one turn says, most). Squared, so that a turn lifts clearly only when it says most of what is
#: rare in the question (docs/decisions/0064-the-questions-rare-words.md).
COVERAGE_LIFT = 2.0

#: A transcript's turn opens with its speaker: "Maya: ...".
_SPEAKER = re.compile(r"([^\W\d_][\w.' -]{0,30}?):\s")
_WORD = re.compile(r"\w+")
_WEEKDAY = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend"
_MONTH = r"January|February|March|April|May|June|July|August|September|October|November|December"
#: A time a turn says: relative ones and weekdays in any case, a month only capitalised ("may").
_TIME = re.compile(
    rf"\b(?:(?i:yesterday|today|tonight|tomorrow|ago|(?:last|next|this) (?:week|month|year|night|{_WEEKDAY})"
    rf"|{_WEEKDAY})|{_MONTH}|(?:19|20)\d\d)\b"
)
_ASKS_WHEN = re.compile(r"^\s*when\b|\b(?:what|which) (?:date|day|year|month)\b|\bhow long ago\b")
_ASKS_HOW_LONG = re.compile(r"\bhow long\b(?! ago)")
_DURATION = re.compile(
    r"\b(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|a few|several|couple of)"
    r" (?:years?|months?|weeks?|days?|hours?)\b|\bsince\b",
    re.IGNORECASE,
)


def _prefix(word: str) -> str:
    """What a turn's word must begin with to say the question's ``word``: all but its last two
    letters, at least four ("painted" by "painting", "adopt" by "adoption", "skyped" by "skype")."""
    return word[: max(4, len(word) - 2)]


def _begins_a_word(text: str, term: str) -> bool:
    """Whether a word of ``text`` begins with ``term``."""
    at = text.find(term)
    while at >= 0:
        if at == 0 or not text[at - 1].isalnum():
            return True
        at = text.find(term, at + 1)
    return False


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


def turn_tokens(turn: TurnCost) -> int:
    """What showing ``turn`` costs (its text may not be read yet: its length is)."""
    return _tokens(turn.chars or len(turn.text)) + TURN_OVERHEAD_TOKENS


def _asks(turn: TurnCost) -> bool:
    return turn.text.rstrip().endswith(("?", "？"))


@dataclass(frozen=True)
class Clues:
    """What a question says about the turn that answers it: the words it names (a speaker among
    them), the words a turn may say of it (``terms``, weighed among the candidates by ``among``)
    and, for a "when" or "how long" question, what the answer holds (a time, a duration). The
    answer's kind is read in English questions only; the words in any language that separates them
    by spaces."""

    words: frozenset[str] = frozenset()
    answer: re.Pattern[str] | None = None
    #: The question's words that tell something (no stopword), as the prefix a turn's word must
    #: begin with (``_prefix``).
    terms: frozenset[str] = frozenset()
    #: Each term's weight among the candidates (``among``), and per candidate (turn id) the share
    #: of that weight it says.
    rarity: Mapping[str, float] = field(default_factory=dict)
    coverage: Mapping[int, float] = field(default_factory=dict)

    @classmethod
    def of(cls, question: str) -> Clues:
        text = question.lower()
        answer = None
        if _ASKS_HOW_LONG.search(text):
            answer = _DURATION
        elif _ASKS_WHEN.search(text):
            answer = _TIME
        words = frozenset(_WORD.findall(text))
        dropped = stopwords()
        terms = frozenset(_prefix(w) for w in words if len(w) > 1 and w not in dropped)
        return cls(words=words, answer=answer, terms=terms)

    def says(self, text: str) -> frozenset[str]:
        """The question's terms ``text`` says."""
        if not self.terms:
            return frozenset()
        low = text.lower()
        return frozenset(term for term in self.terms if term in low and _begins_a_word(low, term))

    def among(self, turns: Sequence[TurnCost]) -> Clues:
        """These clues with each term weighed by how few of ``turns`` (the candidates, those whose
        text is read) say it: log((n + 1) / (df + 0.5)), as an inverse document frequency over the
        candidates; a term none says weighs nothing. A turn not among them says none."""
        said = {t.pk: self.says(t.text) for t in turns if t.text}
        counts = Counter(term for terms in said.values() for term in terms)
        n = len(said)
        rarity = {term: math.log((n + 1) / (df + 0.5)) for term, df in counts.items()}
        total = sum(rarity.values())
        coverage = (
            {pk: sum(rarity[term] for term in terms) / total for pk, terms in said.items()} if total else {}
        )
        return dataclasses.replace(self, rarity=rarity, coverage=coverage)

    def lift(self, turn: TurnCost) -> float:
        """How much higher ``turn`` stands for this question (1 when its text is not read)."""
        text = turn.text
        if not text:
            return 1.0
        lift = 1.0
        speaker = _SPEAKER.match(text)
        if speaker and set(_WORD.findall(speaker.group(1).lower())) <= self.words:
            lift *= SPEAKER_LIFT
        if self.answer is not None and self.answer.search(text):
            lift *= ANSWER_LIFT
        if self.coverage:
            lift *= 1.0 + COVERAGE_LIFT * self.coverage.get(turn.pk, 0.0) ** 2
        return lift


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


def candidate_ids(hits: Sequence[Candidate], turns: Sequence[Sequence[Any]], neighbours: int) -> list[int]:
    """The ids of every turn ``choose`` may show: a caller that asks it to weigh them by the
    question reads their text first (a packed episode's turns are in the database only)."""
    return [
        rows[i].pk for hit, rows in zip(hits, turns, strict=True) for i in candidates(hit, rows, neighbours)
    ]


def candidate_reads(hits: Sequence[Any]) -> tuple[list[int], list[int]]:
    """What ``candidates`` may put forward, before the hits' turns are read: the matched turns
    (with their neighbours) and the episodes with none (their first turns) of these hits
    (``retrieval.services.Hit``): the turns whose text the read of the hits' turns brings along
    (``episodes.stores.rows.turns_with_similarity``'s ``around`` and ``leading``)."""
    around = [pk for hit in hits for pk, _ in hit.matched]
    leading = [hit.episode.pk for hit in hits if not hit.matched]
    return around, leading


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
    question: str = "",
) -> list[list[int]]:
    """Per hit, the positions in its ``turns`` to show, in the episode's order. ``spent``: tokens
    the answer already holds (packed shapes, framing); ``similarity``: turn id -> cosine to the
    query vector, when there is one (``candidates``); ``question``: the query's text, whose
    ``Clues`` weigh the candidates whose text is read."""
    left = budget.tokens - spent
    scored = [
        candidates(hit, rows, budget.neighbours, similarity) for hit, rows in zip(hits, turns, strict=True)
    ]
    clues = Clues.of(question).among([turns[h][i] for h, scores in enumerate(scored) for i in scores])
    chosen: list[set[int]] = [set() for _ in hits]

    def take(h: int, i: int) -> bool:
        nonlocal left
        cost = turn_tokens(turns[h][i])
        if i in chosen[h] or cost > left:
            return False
        chosen[h].add(i)
        left -= cost
        return True

    rest = sorted(
        (-s * clues.lift(turns[h][i]), h, i) for h, scores in enumerate(scored) for i, s in scores.items()
    )
    for _, h, i in rest:
        take(h, i)
    return [sorted(positions) for positions in chosen]
