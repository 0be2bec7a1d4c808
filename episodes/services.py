"""Writes on the system of record. Postgres first, in one transaction; the hot index after commit.

Every function is ``<thing>_<verb>(*, tenant, ...)``, keyword-only, and takes ``now`` from its
caller (time is an input).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import F, Max

from memory_platform.embeddings import EmbeddingError, embedder_for
from memory_platform.tenancy.models import Tenant

from .extraction import extract_decisions, extract_entities
from .indexing import CONTEXT_REACH, _normalise, episodes_index_hot, set_windows
from .language import has_han, index_text, language_of
from .models import (
    MENTIONED_LIMIT,
    SEARCH_TEXT_LIMIT,
    Episode,
    ForgottenUser,
    Layer,
    Link,
    LinkKind,
    Role,
    State,
    Turn,
    turn_hot_bytes,
)
from .scope import Scope
from .segmentation import OpenEpisode, SegmentationRules, starts_new_episode
from .stores.bulk_copy import copy_rows
from .stores.hot import HotUnavailable, unavailable_reason
from .when import mention_text, mentioned

logger = logging.getLogger(__name__)


class EpisodeNotFound(Exception):
    pass


class ConflictError(Exception):
    pass


class UserForgotten(Exception):
    """A write names a ``user_id`` its tenant erased for good (``models.ForgottenUser``)."""

    def __init__(self, user_ids: Sequence[str]):
        super().__init__(
            f"user_id {', '.join(repr(u) for u in user_ids)} was erased from this tenant for good; "
            "its writes are refused (an operator can lift this in the console)"
        )
        self.user_ids = list(user_ids)


def refuse_forgotten(tenant: Tenant, user_ids: Iterable[str | None]) -> None:
    """Raise UserForgotten when a write names a user the tenant erased: nothing is written."""
    forgotten = ForgottenUser.among(tenant, user_ids)
    if forgotten:
        raise UserForgotten(forgotten)


@dataclass(frozen=True)
class TurnInput:
    role: str
    text: str
    scope: Scope = Scope.owner()
    occurred_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    episode_boundary: bool = False
    vector: np.ndarray | None = None
    #: "en", "ru" or "zh"; "" reads it off the text (``language.language_of``).
    language: str = ""


@dataclass(frozen=True)
class IngestedTurn:
    turn_id: int
    episode_id: int
    seq: int
    #: What the API shows (``episodes.public_ids``).
    public_id: str
    episode_public_id: str


@dataclass
class IngestResult:
    turns: list[IngestedTurn]
    episode_ids: list[int]
    indexed: bool = False
    queued: bool = False
    #: Why the turns are not searchable yet ("" once they are).
    reason: str = ""
    #: Why the turns could not be embedded ("" when they were, or are embedded later by design).
    unembedded: str = ""


#: Called with the episodes an ingest wrote, before they are indexed (``lifecycle.quota``).
MakeRoom = Callable[[list[int]], object]


def _lock_scope(tenant: Tenant, scope: Scope) -> None:
    # Serialises ingests into one session: two concurrent batches must not both open an episode
    # or hand out the same sequence numbers. Released at commit.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [f"{tenant.id}|{scope.user_id}|{scope.agent_id}|{scope.session_id}"],
        )


def embed_texts(tenant: Tenant, texts: Sequence[str]) -> np.ndarray:
    return embedder_for(tenant).embed(list(texts))


def turns_ingest(
    *,
    tenant: Tenant,
    turns: Sequence[TurnInput],
    now: datetime,
    rules: SegmentationRules,
    make_room: MakeRoom | None,
    asynchronous: bool = False,
) -> IngestResult:
    """Append turns; durable in Postgres on return. Sync: also searchable. Async: a worker indexes.

    ``rules`` are the tenant's segmentation rules (its policy's, read by the caller); ``make_room``
    keeps the tenant within its hot quota (the lifecycle's), called with the episodes written once
    they are durable and before they are indexed.

    The turns' texts go through the embedder in one call, before the transaction; their window
    vectors are derived here or embedded when they are indexed (``indexing.set_windows``). The
    batch is written in a fixed number of statements, whatever its size: its new episodes, links
    and turns each in one (``_write_batch``)."""
    refuse_forgotten(tenant, (t.scope.user_id for t in turns))
    vectors: list[np.ndarray | None] = [t.vector for t in turns]
    missing = [i for i, v in enumerate(vectors) if v is None]
    embedder = embedder_for(tenant)
    unembedded = ""
    if missing and not asynchronous and embedder.computes:
        try:
            computed = embedder.embed([turns[i].text for i in missing])
        except EmbeddingError as exc:
            # Durable first: the turns are stored without vectors, found by full text meanwhile,
            # and embedded and indexed by the repair task once the embedder answers again.
            logger.warning("embedding failed, storing %d turn(s) unembedded: %s", len(missing), exc)
            unembedded = str(exc)
        else:
            for i, vector in zip(missing, computed, strict=True):
                vectors[i] = vector

    by_scope: OrderedDict[Scope, list[int]] = OrderedDict()
    for i, turn in enumerate(turns):
        by_scope.setdefault(turn.scope, []).append(i)

    with transaction.atomic():
        batch = _Batch(now=now)
        for scope, indices in by_scope.items():
            _lock_scope(tenant, scope)
            _place_scope(tenant, scope, indices, turns, vectors, rules, batch)
        _write_batch(tenant, batch, windows=embedder.computes)
        made = sorted(batch.placed, key=lambda placed: placed[0])
        episode_ids = list(dict.fromkeys(into.episode.pk for into in batch.intos))
        opened = {into.episode.pk: into.turns for into in batch.intos if into.opened}
        result = IngestResult(
            turns=[
                IngestedTurn(
                    turn_id=row.pk,
                    episode_id=row.episode_id,
                    seq=row.seq,
                    public_id=row.public_id,
                    episode_public_id=into.episode.public_id,
                )
                for _, row, into in made
            ],
            episode_ids=episode_ids,
            unembedded=unembedded,
        )
        transaction.on_commit(
            lambda: _after_write(tenant, episode_ids, result, make_room, asynchronous, opened)
        )
    return result


def _after_write(
    tenant: Tenant,
    episode_ids: list[int],
    result: IngestResult,
    make_room: MakeRoom | None,
    queue: bool,
    opened: Mapping[int, list[Turn]] | None = None,
) -> None:
    if make_room is not None:
        try:
            make_room(episode_ids)
        except Exception:
            # The turns are stored; Redis' noeviction still bounds the damage, and the tick applies
            # the quota again within the hour.
            logger.exception("could not keep tenant %s within its hot quota", tenant.name)
    if queue:
        _enqueue_index(tenant, episode_ids, result)
    else:
        _index_now(tenant, episode_ids, result, opened or {})


@dataclass(eq=False)
class _Into:
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
class _Batch:
    """What one ingest writes, planned in memory before any of it is sent."""

    now: datetime
    intos: list[_Into] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    #: Episodes already stored that a new episode of the batch continues.
    continued: list[Episode] = field(default_factory=list)
    #: (position in the request, turn, the episode it goes into).
    placed: list[tuple[int, Turn, _Into]] = field(default_factory=list)


def _place_scope(
    tenant: Tenant,
    scope: Scope,
    indices: list[int],
    turns: Sequence[TurnInput],
    vectors: list[np.ndarray | None],
    rules: SegmentationRules,
    batch: _Batch,
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
    into: _Into | None = None
    state: OpenEpisode | None = None
    if latest is not None and not latest.anchor:
        centroid = None
        if latest.embedding is not None:
            centroid = np.asarray(latest.embedding, dtype=np.float32) * max(1, latest.turn_count)
        state = OpenEpisode(latest.turn_count, latest.last_occurred_at, centroid)
        into = _Into(latest, opened=False, centroid_sum=centroid)
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
                title=_title(turn.text),
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
            into = _Into(episode, opened=True)
        assert into is not None and state is not None
        if not into.turns:
            batch.intos.append(into)
        last_seq += 1
        row = Turn(
            tenant=tenant,
            episode=into.episode,
            **scope.owner_fields(),
            seq=last_seq,
            role=turn.role,
            text=turn.text,
            language=language_of(turn.text, given=turn.language),
            index_text=_index_text(turn.text),
            occurred_at=occurred_at,
            ingested_at=now,
            metadata=turn.metadata,
            mentioned=_mentioned(turn.text, occurred_at),
            embedding=vector,
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


#: The aggregates of an episode its new turns change (``_fold``).
_FOLDED = (
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


def _write_batch(tenant: Tenant, batch: _Batch, *, windows: bool) -> None:
    """The batch's rows: one insert each for its new episodes, links and turns; an update for each
    stored episode it adds turns to or continues, and one for the window vectors its new turns
    change. ``windows``: the tenant's embedder computes vectors (a caller's own vectors get no
    window vector: ``indexing.turn_documents`` blends their neighbours when it indexes them)."""
    for into in batch.intos:
        _fold(into)
    copy_rows([into.episode for into in batch.intos if into.opened])
    Link.objects.bulk_create(batch.links)  # their episodes have their keys now
    changed: list[Turn] = []
    if windows:
        for into in batch.intos:
            changed += _place_windows(into)
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
            **{name: getattr(episode, name) for name in _FOLDED}, version=F("version") + 1
        )
    for episode in batch.continued:
        if episode not in stored:
            Episode.objects.for_tenant(tenant).filter(pk=episode.pk).update(last_linked_at=batch.now)


def _place_windows(into: _Into) -> list[Turn]:
    """Set the window vectors of the episode's new turns (``indexing.set_windows``); returns its
    stored turns whose window now reaches a new turn, with their window set again. A window left
    NULL (embedded when indexed, or with a turn not embedded yet) is made by indexing."""
    turns = [*into.tail, *into.turns]
    first = max(0, len(into.tail) - CONTEXT_REACH)
    set_windows(turns, range(first, len(turns)))
    return into.tail[first:]


def _fold(into: _Into) -> None:
    """Fold the new turns into their episode's aggregates (counts, times, centroid, entities, the
    days they mention): ``_FOLDED``."""
    episode, added = into.episode, into.turns
    texts = [t.text for t in added]
    joined = "\n".join(texts)
    episode.turn_count += len(added)
    episode.first_occurred_at = min([episode.first_occurred_at] + [t.occurred_at for t in added])
    episode.last_occurred_at = max([episode.last_occurred_at] + [t.occurred_at for t in added])
    if into.centroid_sum is not None:
        episode.embedding = _normalise(np.asarray(into.centroid_sum, dtype=np.float32))
    episode.entities = _merge(episode.entities, extract_entities(joined), 200)
    episode.decisions = _merge(episode.decisions, extract_decisions(joined), 50)
    episode.mentioned = _merge(episode.mentioned, [d for t in added for d in t.mentioned], MENTIONED_LIMIT)
    episode.raw_chars += sum(len(t) for t in texts)
    episode.hot_bytes += sum(turn_hot_bytes(t) for t in texts)
    episode.search_text = (episode.search_text + "\n" + index_text(joined)).strip()[:SEARCH_TEXT_LIMIT]
    episode.needs_reindex = True


def _index_text(text: str) -> str | None:
    """``Turn.index_text``: set only where full text reads the turn otherwise than its text."""
    return index_text(text) if has_han(text) else None


def _mentioned(text: str, said_at: datetime) -> list[str]:
    """``Turn.mentioned``: the days the text's relative time phrases point at, said at ``said_at``."""
    return list(dict.fromkeys(mention_text(w) for w in mentioned(text, said_at)))


def _title(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 80 else line[:79].rsplit(" ", 1)[0] + "…"


def _merge(old: list[str], new: list[str], limit: int) -> list[str]:
    seen = {x.lower() for x in old}
    out = list(old)
    for item in new:
        if item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out[:limit]


def _index_now(
    tenant: Tenant, episode_ids: list[int], result: IngestResult, opened: Mapping[int, list[Turn]]
) -> None:
    if result.unembedded:
        # Indexing would ask the embedder again, which just failed: the repair task does it.
        result.reason = f"{result.unembedded}; {_LATER_EMBEDDED}"
        return
    try:
        episodes_index_hot(tenant.pk, episode_ids, written=opened)
        result.indexed = True
    except HotUnavailable as exc:
        # The write is durable; the episodes keep needs_reindex=True, search finds them in Postgres
        # meanwhile, and the repair task (every minute) indexes them once Redis takes writes again.
        logger.warning("hot index unavailable, %d episode(s) left for re-indexing: %s", len(episode_ids), exc)
        result.reason = (
            f"{unavailable_reason(exc)}; the turns are stored, found through Postgres meanwhile, and "
            "indexed once Redis takes writes again"
        )
    except EmbeddingError as exc:
        logger.warning("embedding failed, %d episode(s) left for re-indexing: %s", len(episode_ids), exc)
        result.reason = f"{exc}; {_LATER_EMBEDDED}"


_LATER_EMBEDDED = (
    "the turns are stored, found by full text meanwhile, and embedded and indexed once the embedder answers"
)


def _enqueue_index(tenant: Tenant, episode_ids: list[int], result: IngestResult) -> None:
    from django_q.tasks import async_task

    try:
        async_task(
            "episodes.tasks.index_episodes", episode_ids, tenant_id=str(tenant.id), group=f"index:{tenant.id}"
        )
        result.queued = True
        result.reason = "queued: a worker indexes them"
    except Exception as exc:
        logger.warning("could not queue indexing (%s); episodes stay marked for re-indexing", exc)
        result.reason = f"could not queue the indexing ({type(exc).__name__}); the repair task indexes them within a minute"


# --- explicit memories ----------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryInput:
    text: str
    kind: str = "fact"
    title: str = ""
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    anchor: bool = False
    scope: Scope = Scope.owner()
    occurred_at: datetime | None = None
    vector: np.ndarray | None = None
    #: As ``TurnInput.language``.
    language: str = ""


def memory_create(
    *, tenant: Tenant, memory: MemoryInput, now: datetime, make_room: MakeRoom | None
) -> Episode:
    refuse_forgotten(tenant, [memory.scope.user_id])
    vector = memory.vector
    unembedded = ""
    if vector is None:
        try:
            vector = embed_texts(tenant, [memory.text])[0]
        except EmbeddingError as exc:
            logger.warning("embedding failed, storing the memory unembedded: %s", exc)
            unembedded = str(exc)
    occurred_at = memory.occurred_at or now
    days = _mentioned(memory.text, occurred_at)
    with transaction.atomic():
        episode = Episode.objects.create(
            tenant=tenant,
            **memory.scope.owner_fields(),
            kind=memory.kind,
            title=memory.title or _title(memory.text),
            anchor=memory.anchor,
            tags=list(memory.tags),
            metadata=memory.metadata,
            first_occurred_at=occurred_at,
            last_occurred_at=occurred_at,
            last_accessed_at=now,
            turn_count=1,
            embedding=vector,
            entities=extract_entities(memory.text),
            decisions=extract_decisions(memory.text),
            mentioned=days,
            raw_chars=len(memory.text),
            hot_bytes=turn_hot_bytes(memory.text),
            search_text=index_text(memory.text)[:SEARCH_TEXT_LIMIT],
            needs_reindex=True,
        )
        Turn.objects.create(
            tenant=tenant,
            episode=episode,
            **memory.scope.owner_fields(),
            seq=0,
            role=Role.MEMORY,
            text=memory.text,
            language=language_of(memory.text, given=memory.language),
            index_text=_index_text(memory.text),
            occurred_at=occurred_at,
            ingested_at=now,
            metadata=memory.metadata,
            mentioned=days,
            embedding=vector,
        )
        result = IngestResult(turns=[], episode_ids=[episode.pk], unembedded=unembedded)
        transaction.on_commit(lambda: _after_write(tenant, [episode.pk], result, make_room, False))
    return episode
