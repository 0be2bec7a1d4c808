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

from memory_platform.embeddings import EmbeddingError, embedder_for
from memory_platform.tenancy.models import Tenant

from .extraction import extract_decisions, extract_entities
from .indexing import episodes_index_hot
from .language import index_text
from .models import SEARCH_TEXT_LIMIT, Episode, ForgottenUser, Role, Turn, turn_hot_bytes
from .placement import Batch, mentioned_days, new_turn, place_scope, title_of, write_batch
from .scope import Scope
from .segmentation import SegmentationRules
from .stores.hot import HotUnavailable, unavailable_reason

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
    and turns each in one (``placement.write_batch``)."""
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
        batch = Batch(now=now)
        for scope, indices in by_scope.items():
            _lock_scope(tenant, scope)
            place_scope(tenant, scope, indices, turns, vectors, rules, batch)
        write_batch(tenant, batch, windows=embedder.computes)
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
    days = mentioned_days(memory.text, occurred_at)
    with transaction.atomic():
        episode = Episode.objects.create(
            tenant=tenant,
            **memory.scope.owner_fields(),
            kind=memory.kind,
            title=memory.title or title_of(memory.text),
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
        new_turn(
            tenant,
            episode,
            memory.scope,
            seq=0,
            role=Role.MEMORY,
            text=memory.text,
            language=memory.language,
            occurred_at=occurred_at,
            now=now,
            metadata=memory.metadata,
            vector=vector,
        ).save(force_insert=True)
        result = IngestResult(turns=[], episode_ids=[episode.pk], unembedded=unembedded)
        transaction.on_commit(lambda: _after_write(tenant, [episode.pk], result, make_room, False))
    return episode
