"""How an ingest's turns are placed into episodes and written: each scope's turns segmented into its
open episode and new ones (``place_scope``), planned in memory as one ``Batch``, then written in a
fixed number of statements whatever the batch's size (``write_batch``). ``services.turns_ingest``
drives it inside one transaction; the fields a turn or an episode gets from its text
(``turn_index_text``, ``mentioned_days``, ``title_of``) serve explicit memories too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from django.db.models import F, Max

from memory_platform.tenancy.models import Tenant

from .extraction import extract_decisions, extract_entities
from .indexing import CONTEXT_REACH, _normalise, set_windows
from .language import has_han, index_text, language_of
from .models import (
    MENTIONED_LIMIT,
    SEARCH_TEXT_LIMIT,
    Episode,
    Layer,
    Link,
    LinkKind,
    State,
    Turn,
    turn_hot_bytes,
)
from .scope import Scope
from .segmentation import OpenEpisode, SegmentationRules, starts_new_episode
from .stores.bulk_copy import copy_rows
from .when import mention_text, mentioned

if TYPE_CHECKING:
    from .services import TurnInput


@dataclass(eq=False)
class Into:
    """An episode a batch writes turns into: its scope's open episode, or one the batch opens."""

    episode: Episode
    opened: bool
    turns: list[Turn] = field(default_factory=list)
    #: The running sum of its turns' vectors (its centroid, unnormalised).
    centroid_sum: np.ndarray | None = None
    #: The open episode's last turns before the batch, oldest first: the new turns' windows read
    #: them, and the windows of the last ``CONTEXT_REACH`` of them now reach the new turns.
    tail: list[Turn] = field(default_factory=list)


@dataclass
class Batch:
    """What one ingest writes, planned in memory before any of it is sent."""

    now: datetime
    intos: list[Into] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    #: Episodes already stored that a new episode of the batch continues.
    continued: list[Episode] = field(default_factory=list)
    #: (position in the request, turn, the episode it goes into).
    placed: list[tuple[int, Turn, Into]] = field(default_factory=list)


def place_scope(
    tenant: Tenant,
    scope: Scope,
    indices: list[int],
    turns: Sequence[TurnInput],
    vectors: list[np.ndarray | None],
    rules: SegmentationRules,
    batch: Batch,
) -> None:
    """Segment one scope's turns (``segmentation``) into its open episode and new ones."""
    now = batch.now
    latest = (
        Episode.objects.select_for_update()
        .filter(
            tenant=tenant,
            **scope.owner_fields(),
            kind="conversation",
            layer=Layer.HOT,
            state=State.ACTIVE,
        )
        .order_by("-last_occurred_at", "-id")
        .first()
    )
    # A pinned episode takes no more turns: what is pinned keeps the weight it was checked at
    # (docs/decisions/0038-pinned-memories-within-the-hot-quota.md); the session goes on in a new
    # episode that continues it.
    into: Into | None = None
    state: OpenEpisode | None = None
    if latest is not None and not latest.anchor:
        centroid = None
        if latest.embedding is not None:
            centroid = np.asarray(latest.embedding, dtype=np.float32) * max(1, latest.turn_count)
        state = OpenEpisode(latest.turn_count, latest.last_occurred_at, centroid)
        into = Into(latest, opened=False, centroid_sum=centroid)
    continuing = into
    last_seq = Turn.objects.filter(tenant=tenant, **scope.owner_fields()).aggregate(m=Max("seq"))["m"] or 0
    previous: Episode | None = latest
    for i in indices:
        turn = turns[i]
        occurred_at = turn.occurred_at or now
        vector = vectors[i]
        if starts_new_episode(
            state, occurred_at=occurred_at, vector=vector, boundary=turn.episode_boundary, rules=rules
        ):
            episode = Episode(
                tenant=tenant,
                **scope.owner_fields(),
                kind="conversation",
                title=title_of(turn.text),
                first_occurred_at=occurred_at,
                last_occurred_at=occurred_at,
                last_accessed_at=now,
                needs_reindex=True,
            )
            if previous is not None:
                batch.links.append(
                    Link(tenant=tenant, src=episode, dst=previous, kind=LinkKind.CONTINUES, created_at=now)
                )
                episode.last_linked_at = now
                previous.last_linked_at = now
                if previous is latest:
                    batch.continued.append(latest)
            previous = episode
            state = OpenEpisode(0, occurred_at, None)
            into = Into(episode, opened=True)
        assert into is not None and state is not None
        if not into.turns:
            batch.intos.append(into)
        last_seq += 1
        row = new_turn(
            tenant,
            into.episode,
            scope,
            seq=last_seq,
            role=turn.role,
            text=turn.text,
            language=turn.language,
            occurred_at=occurred_at,
            now=now,
            metadata=turn.metadata,
            vector=vector,
        )
        into.turns.append(row)
        batch.placed.append((i, row, into))
        state.turn_count += 1
        state.last_occurred_at = max(state.last_occurred_at, occurred_at)
        if vector is not None:
            state.centroid_sum = vector.copy() if state.centroid_sum is None else state.centroid_sum + vector
        into.centroid_sum = state.centroid_sum
    if continuing is not None and continuing.turns:
        # Its last turns, for the windows (one statement, through the turn_episode_seq index).
        tail = (
            Turn.objects.filter(tenant=tenant, episode=continuing.episode)
            .order_by("-seq", "-id")
            .only("pk", "tenant_id", "text", "embedding", "context_embedding")[: 2 * CONTEXT_REACH]
        )
        continuing.tail = list(reversed(tail))


#: The aggregates of an episode its new turns change (``fold``).
FOLDED = (
    "turn_count",
    "first_occurred_at",
    "last_occurred_at",
    "embedding",
    "entities",
    "decisions",
    "mentioned",
    "raw_chars",
    "hot_bytes",
    "search_text",
    "needs_reindex",
    "last_linked_at",
)


def write_batch(tenant: Tenant, batch: Batch, *, windows: bool) -> None:
    """The batch's rows: one insert each for its new episodes, links and turns; an update for each
    stored episode it adds turns to or continues, and one for the window vectors its new turns
    change. ``windows``: the tenant's embedder computes vectors (a caller's own vectors get no
    window vector: ``indexing.turn_documents`` blends their neighbours when it indexes them)."""
    for into in batch.intos:
        fold(into)
    copy_rows([into.episode for into in batch.intos if into.opened])
    Link.objects.bulk_create(batch.links)  # their episodes have their keys now
    changed: list[Turn] = []
    if windows:
        for into in batch.intos:
            changed += place_windows(into)
    rows = []
    for into in batch.intos:
        for row in into.turns:
            row.episode_id = into.episode.pk
            rows.append(row)
    copy_rows(rows)
    if changed:
        Turn.objects.bulk_update(changed, ["context_embedding"])
    stored = [into.episode for into in batch.intos if not into.opened]
    for episode in stored:
        Episode.objects.for_tenant(tenant).filter(pk=episode.pk).update(
            **{name: getattr(episode, name) for name in FOLDED}, version=F("version") + 1
        )
    for episode in batch.continued:
        if episode not in stored:
            Episode.objects.for_tenant(tenant).filter(pk=episode.pk).update(last_linked_at=batch.now)


def place_windows(into: Into) -> list[Turn]:
    """Set the window vectors of the episode's new turns (``indexing.set_windows``); returns its
    stored turns whose window now reaches a new turn, with their window set again. A window left
    NULL (embedded when indexed, or with a turn not embedded yet) is made by indexing."""
    turns = [*into.tail, *into.turns]
    first = max(0, len(into.tail) - CONTEXT_REACH)
    set_windows(turns, range(first, len(turns)))
    return into.tail[first:]


def fold(into: Into) -> None:
    """Fold the new turns into their episode's aggregates (counts, times, centroid, entities, the
    days they mention): ``FOLDED``."""
    episode, added = into.episode, into.turns
    texts = [t.text for t in added]
    joined = "\n".join(texts)
    episode.turn_count += len(added)
    episode.first_occurred_at = min([episode.first_occurred_at] + [t.occurred_at for t in added])
    episode.last_occurred_at = max([episode.last_occurred_at] + [t.occurred_at for t in added])
    if into.centroid_sum is not None:
        episode.embedding = _normalise(np.asarray(into.centroid_sum, dtype=np.float32))
    episode.entities = merge_names(episode.entities, extract_entities(joined), 200)
    episode.decisions = merge_names(episode.decisions, extract_decisions(joined), 50)
    episode.mentioned = merge_names(
        episode.mentioned, [d for t in added for d in t.mentioned], MENTIONED_LIMIT
    )
    episode.raw_chars += sum(len(t) for t in texts)
    episode.hot_bytes += sum(turn_hot_bytes(t) for t in texts)
    episode.search_text = (episode.search_text + "\n" + index_text(joined)).strip()[:SEARCH_TEXT_LIMIT]
    episode.needs_reindex = True


def new_turn(
    tenant: Tenant,
    episode: Episode,
    scope: Scope,
    *,
    seq: int,
    role: str,
    text: str,
    language: str,
    occurred_at: datetime,
    now: datetime,
    metadata: dict[str, Any],
    vector: np.ndarray | None,
) -> Turn:
    """A turn of ``episode`` as it is stored, unsaved, with what its text gives it: its language
    (``language`` when the writer named one), its full-text form and the days it mentions."""
    return Turn(
        tenant=tenant,
        episode=episode,
        **scope.owner_fields(),
        seq=seq,
        role=role,
        text=text,
        language=language_of(text, given=language),
        index_text=turn_index_text(text),
        occurred_at=occurred_at,
        ingested_at=now,
        metadata=metadata,
        mentioned=mentioned_days(text, occurred_at),
        embedding=vector,
    )


def turn_index_text(text: str) -> str | None:
    """``Turn.index_text``: set only where full text reads the turn otherwise than its text."""
    return index_text(text) if has_han(text) else None


def mentioned_days(text: str, said_at: datetime) -> list[str]:
    """``Turn.mentioned``: the days the text's relative time phrases point at, said at ``said_at``."""
    return list(dict.fromkeys(mention_text(w) for w in mentioned(text, said_at)))


def title_of(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 80 else line[:79].rsplit(" ", 1)[0] + "…"


def merge_names(old: list[str], new: list[str], limit: int) -> list[str]:
    seen = {x.lower() for x in old}
    out = list(old)
    for item in new:
        if item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out[:limit]
