"""Context assembly: what an agent should put in its prompt for a session now, within a budget
(docs/decisions/0039-evidence-within-a-budget.md).

In order of what the budget serves first: the standing facts (pinned memories), up to a share of
the budget; the latest turns of this conversation, up to a share; the evidence for the query (the
turns ``retrieval.evidence`` chooses across the search's hits, whatever their layer, the same
choice ``POST /search`` shows); then the packed shapes of those hits (key points, headlines) as
framing, and what they link to, while tokens remain. The text lists the relevant memories in time
order, each under its date.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from episodes import shapes
from episodes.models import Episode, Layer, Link, LinkKind, State
from episodes.scope import Scope
from episodes.stores.rows import TurnRow, turn_texts, turns_for, turns_with_similarity
from memory_platform.tenancy.models import Tenant

from . import evidence
from .evidence import Budget, estimate_tokens
from .query import DEFAULT_SCOPE, SearchQuery
from .services import Hit, record_access, search
from .weights import default_budget

#: At most these shares of the budget go to the standing facts and to this conversation's turns
#: (the rest, and whatever they leave, to the evidence for the query).
ANCHOR_SHARE = 0.25
SESSION_SHARE = 0.25
TITLES = {
    "anchors": "Standing facts",
    "session": "This conversation",
    "relevant": "Relevant memories",
    "linked": "Linked memories",
}


def context(
    *,
    tenant: Tenant,
    session_id: str | None,
    query_text: str,
    max_tokens: int,
    now: datetime,
    user_id: str | None = None,
    agent_id: str | None = None,
    limit: int = 10,
    min_score: float | None = None,
    record: bool = True,
    ids: bool = False,
) -> dict[str, Any]:
    """The context for ``query_text`` within ``max_tokens`` (``evidence.estimate_tokens``): its
    ``text`` (markdown sections), the same content as ``sections`` (each memory with its id), and
    the ``tokens`` used. The relevant memories are at least ``min_score`` similar, when given.
    ``record``: count what it shows as used (an access; a linked memory's as a traversal). ``ids``:
    the text names each memory by its id (and a relevant one's score), within the budget too."""
    # Every section keeps to whose memories were asked for: a user's context never shows another
    # user's session that shares its name, nor what a link leads to in another user's memories.
    owner = Scope(user_id=user_id or None, agent_id=agent_id or None)
    episodes = Episode.objects.for_tenant(tenant).filter(owner.q())
    anchors = list(
        episodes.filter(Scope(anchor=True, states=(State.ACTIVE,)).q()).order_by("-last_accessed_at")[:50]
    )
    session_eps: list[Episode] = []
    if session_id:
        session_scope = Scope(session_id=session_id, layers=(Layer.HOT,), states=(State.ACTIVE,))
        session_eps = list(episodes.filter(session_scope.q()).order_by("-last_occurred_at")[:20])
    relevant: list[Hit] = []
    vector = None
    degraded = ""
    if query_text.strip():
        found = search(
            tenant=tenant,
            query=SearchQuery(
                text=query_text,
                scope=DEFAULT_SCOPE.replace(user_id=user_id, agent_id=agent_id),
                limit=limit,
                min_score=min_score,
                record_access=False,  # what the context shows is recorded below, once
            ),
            now=now,
        )
        relevant, vector = found.hits, found.query_vector
        degraded = found.reason if found.degraded else ""
    written = _Writer(max_tokens, ids=ids)
    shown = {e.pk for e in anchors + session_eps}
    relevant = [h for h in relevant if h.episode.pk not in shown]
    episode_ids = [*shown, *(h.episode.pk for h in relevant)]
    # The turns' similarities to the query, and the text of every turn the evidence may show, in the
    # same statement (the evidence is chosen by them).
    neighbours = default_budget().neighbours
    around, leading = evidence.candidate_reads(relevant)
    turns, similarity = turns_with_similarity(
        tenant,
        episode_ids,
        full={e.pk for e in anchors + session_eps if e.layer == Layer.HOT},
        vector=vector if relevant else None,
        around=around,
        leading=leading,
        reach=neighbours,
    )

    cap = written.used + int(max_tokens * ANCHOR_SHARE)
    for episode in anchors:
        written.add("anchors", episode, shapes.prompt_line(episode, turns[episode.pk]), cap=cap)
    cap = written.used + int(max_tokens * SESSION_SHARE)
    for episode in session_eps:  # newest first: the latest turns that fit
        written.add_latest("session", episode, turns[episode.pk], cap=cap)

    # The evidence: chosen turns first, then the packed shapes as framing while tokens remain.
    dated = [
        estimate_tokens(written.label(h.episode, h.score) + _date_line(h.episode, "")) + 2 for h in relevant
    ]
    room = written.left - estimate_tokens(f"## {TITLES['relevant']}\n") - 1
    lists = [turns[h.episode.pk] for h in relevant]
    # The question weighs the candidates by their text (``evidence.Clues``), read with the turns
    # above; any still missing here.
    unread = {t.pk for row in lists for t in row if not t.text}
    read = turn_texts(
        tenant, [pk for pk in evidence.candidate_ids(relevant, lists, neighbours) if pk in unread]
    )
    lists = [[read.get(t.pk, t) for t in row] for row in lists]
    chosen = evidence.choose(
        relevant,
        lists,
        Budget(tokens=max(0, room), neighbours=neighbours),
        spent=sum(dated),
        similarity=similarity,
        question=query_text,
    )
    picked = [[row[i] for i in positions] for row, positions in zip(lists, chosen, strict=True)]
    texts = turn_texts(tenant, [t.pk for row in picked for t in row if not t.text])
    picked = [[texts.get(t.pk, t) for t in row] for row in picked]
    room -= sum(dated) + sum(evidence.turn_tokens(t) for row in picked for t in row)
    framed = evidence.packed_framing(relevant, room, shapes.packed_text)
    for i in sorted(range(len(relevant)), key=lambda i: relevant[i].episode.first_occurred_at):
        hit, rows = relevant[i], picked[i]
        if rows and written.says_already(f"{t.role}: {t.text}" for t in rows):
            continue  # a copy of what the context holds (the same fact written twice): once is enough
        packed = shapes.packed_text(hit.episode) if hit.episode.pk in framed else ""
        while rows or packed:
            block = "\n  ".join(
                [_date_line(hit.episode, packed), *shapes.turn_lines(turns[hit.episode.pk], rows)]
            )
            if written.add("relevant", hit.episode, block, score=hit.score):
                break
            # Short by a rounding: its last turn goes, then its framing.
            rows, packed = (rows[:-1], packed) if rows else (rows, "")

    # What the relevant memories link to comes last, if the budget allows: following a link is a
    # traversal, not an access.
    linked_ids = linked_from(
        tenant=tenant, episode_ids=[h.episode.pk for h in relevant], exclude=set(episode_ids)
    )
    linked = list(episodes.filter(pk__in=linked_ids))
    linked_turns = turns_for(
        tenant, [e.pk for e in linked], full={e.pk for e in linked if e.layer == Layer.HOT}
    )
    for episode in linked:
        written.add("linked", episode, shapes.prompt_line(episode, linked_turns[episode.pk]))
    if record:
        traversed = sorted(e.pk for e in linked if e.pk in written.seen)
        record_access(
            tenant=tenant, episode_ids=sorted(written.seen - set(traversed)), traversed=traversed, now=now
        )
    return {
        "sections": written.sections,
        "text": written.text(),
        "tokens": written.used,
        "max_tokens": max_tokens,
        "degraded": bool(degraded),
        "degraded_reason": degraded or None,
    }


def _date_line(episode: Episode, packed: str) -> str:
    when = episode.first_occurred_at.date().isoformat()
    return f"[{when}] {packed}".rstrip()


class _Writer:
    """The sections of a context as they fill, and the tokens they hold."""

    def __init__(self, max_tokens: int, *, ids: bool = False):
        self.max_tokens = max_tokens
        self.ids = ids
        self.used = 0
        self.seen: set[int] = set()
        self.sections: dict[str, list[dict[str, Any]]] = {name: [] for name in TITLES}

    @property
    def left(self) -> int:
        return self.max_tokens - self.used

    def _cost(self, section: str, text: str) -> int:
        # A section's first item also pays for its heading.
        heading = 0 if self.sections[section] else estimate_tokens(f"## {TITLES[section]}\n") + 1
        return heading + estimate_tokens(text) + 1

    def label(self, episode: Episode, score: float | None = None) -> str:
        """What names a memory in the text, when ids are asked for ("" otherwise)."""
        if not self.ids:
            return ""
        return f"(id {episode.public_id}" + ("" if score is None else f", score {score:.3g}") + ") "

    def add(
        self,
        section: str,
        episode: Episode,
        text: str,
        *,
        cap: int | None = None,
        score: float | None = None,
    ) -> bool:
        """Add ``text`` whole if it fits within the budget (and ``cap``)."""
        text = self.label(episode, score) + text
        cost = self._cost(section, text)
        limit = self.max_tokens if cap is None else min(cap, self.max_tokens)
        if episode.pk in self.seen or self.used + cost > limit:
            return False
        self.used += cost
        self.seen.add(episode.pk)
        item: dict[str, Any] = {"episode_id": episode.public_id, "layer": episode.layer, "text": text}
        if score is not None:
            item["score"] = round(score, 6)
        self.sections[section].append(item)
        return True

    def add_latest(self, section: str, episode: Episode, turns: Sequence[TurnRow], *, cap: int) -> None:
        """The latest of ``turns`` that fit within ``cap``, in their order."""
        kept: list[TurnRow] = []
        room = min(cap, self.max_tokens) - self.used - self._cost(section, _date_line(episode, ""))
        for turn in reversed(turns):
            cost = evidence.turn_tokens(turn)
            if cost > room:
                break
            kept.insert(0, turn)
            room -= cost
        if kept:
            lines = [_date_line(episode, ""), *shapes.turn_lines(turns, kept)]
            self.add(section, episode, "\n  ".join(lines))

    def says_already(self, lines: Iterable[str]) -> bool:
        """Whether every one of ``lines`` is in an item the sections hold already."""
        held = [item["text"] for items in self.sections.values() for item in items]
        return all(any(line in text for text in held) for line in lines)

    def text(self) -> str:
        parts = []
        for name, items in self.sections.items():
            if items:
                parts.append(f"## {TITLES[name]}\n" + "\n".join(f"- {item['text']}" for item in items))
        return "\n\n".join(parts)


def linked_from(*, tenant: Tenant, episode_ids: list[int], exclude: set[int]) -> list[int]:
    """Live episodes the given ones link to (a merged copy is not followed)."""
    return list(
        Link.objects.filter(tenant=tenant, src_id__in=episode_ids, dst__state=State.ACTIVE)
        .exclude(kind=LinkKind.MERGED_INTO)
        .exclude(dst_id__in=exclude)
        .values_list("dst_id", flat=True)
        .distinct()[:20]
    )
