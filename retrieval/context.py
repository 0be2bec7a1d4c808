"""Context assembly: what an agent should put in its prompt for a session now."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from episodes import shapes
from episodes.models import Episode, Layer, Link, LinkKind, State
from episodes.scope import Scope
from episodes.stores.rows import turns_for
from memory_platform.tenancy.models import Tenant

from .query import DEFAULT_SCOPE, SearchQuery
from .services import Hit, record_access, search


def estimate_tokens(text: str) -> int:
    """About four characters a token for English; good enough to respect a budget."""
    return max(1, math.ceil(len(text) / 4))


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
) -> dict[str, Any]:
    """Anchors, then the session's hot episodes (newest first), then the memories relevant to
    ``query_text`` (at least ``min_score`` similar, when given), each added whole while it fits in
    ``max_tokens``."""
    sections: dict[str, list[dict[str, Any]]] = {"anchors": [], "session": [], "relevant": [], "linked": []}
    used = 0
    seen: set[int] = set()
    lines: list[str] = []

    def add(section: str, episode: Episode, text: str, extra: dict[str, Any]) -> bool:
        nonlocal used
        cost = estimate_tokens(text)
        if episode.pk in seen or used + cost > max_tokens:
            return False
        used += cost
        seen.add(episode.pk)
        sections[section].append(
            {"episode_id": episode.public_id, "layer": episode.layer, "text": text, **extra}
        )
        lines.append(text)
        return True

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
    if query_text.strip():
        relevant = search(
            tenant=tenant,
            query=SearchQuery(
                text=query_text,
                scope=DEFAULT_SCOPE.replace(user_id=user_id, agent_id=agent_id),
                limit=limit,
                min_score=min_score,
            ),
            now=now,
        ).hits
    ids = [e.pk for e in anchors + session_eps] + [h.episode.pk for h in relevant]
    # What the relevant memories link to comes last, if the budget allows: following a link is a
    # traversal (seed 002), not an access.
    linked_ids = linked_from(tenant=tenant, episode_ids=[h.episode.pk for h in relevant], exclude=set(ids))
    linked = list(episodes.filter(pk__in=linked_ids))
    ids += [e.pk for e in linked]
    turns = turns_for(tenant, ids, full=set(ids))
    for episode in anchors:
        add("anchors", episode, shapes.prompt_line(episode, turns.get(episode.pk, [])), {})
    for episode in session_eps:
        add("session", episode, shapes.prompt_line(episode, turns.get(episode.pk, [])), {})
    snippet = shapes.Snippet.default()  # a relevant memory: the turns around its best matches
    for hit in relevant:
        add(
            "relevant",
            hit.episode,
            shapes.prompt_line(hit.episode, turns.get(hit.episode.pk, []), hit.matched, snippet),
            {"score": round(hit.score, 6)},
        )
    for episode in linked:
        add("linked", episode, shapes.prompt_line(episode, turns.get(episode.pk, [])), {})
    traversed = sorted(e.pk for e in linked if e.pk in seen)
    record_access(tenant=tenant, episode_ids=sorted(seen - set(traversed)), traversed=traversed, now=now)
    text = _render_text(sections)
    return {"sections": sections, "text": text, "tokens": used, "max_tokens": max_tokens}


def _render_text(sections: dict[str, list[dict[str, Any]]]) -> str:
    titles = {
        "anchors": "Standing facts",
        "session": "This conversation",
        "relevant": "Relevant memories",
        "linked": "Linked memories",
    }
    parts = []
    for name, items in sections.items():
        if items:
            parts.append(f"## {titles[name]}\n" + "\n".join(f"- {item['text']}" for item in items))
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
