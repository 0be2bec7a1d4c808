"""The hot index, kept from Postgres: which documents an episode has in Redis, and writing them.

Postgres is the system of record; everything here can be rebuilt from it (`rebuild_hot`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from django.db import transaction

from memory_platform.embeddings import embedder_for
from memory_platform.tenancy.models import Tenant

from .models import Episode, Layer, State, Turn
from .stores.hot import HotUnavailable, hot_store
from .stores.hot_documents import TurnDoc

logger = logging.getLogger(__name__)


def _normalise(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def centroid(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """An episode's embedding: the normalised sum of its turns' vectors."""
    return _normalise(np.sum(np.stack([np.asarray(v, dtype=np.float32) for v in vectors]), axis=0))


def episodes_index_hot(tenant_id: Any, episode_ids: Sequence[int]) -> int:
    """Index the tenant's hot episodes among ``episode_ids`` (and their turns) in Redis from
    Postgres; clear their reindex mark.

    Turns still lacking an embedding (async ingest, an embedder that was down) are embedded
    first. Raises on Redis and embedding errors.
    """
    store = hot_store()
    episodes = list(
        Episode.objects.filter(tenant_id=tenant_id, pk__in=list(episode_ids), layer=Layer.HOT)
        .exclude(state=State.FORGOTTEN)
        .select_related("tenant")
    )
    indexed = 0
    for episode in episodes:
        turns = list(episode.turns.order_by("seq", "id"))
        embed_turns(episode, turns)
        store.index_episode(episode, turn_documents(episode, turns))
        # Only clear the mark if nothing changed since we read the episode; otherwise the newer
        # write has queued (or will need) its own indexing.
        Episode.objects.for_tenant(episode.tenant_id).filter(pk=episode.pk, version=episode.version).update(
            needs_reindex=False
        )
        indexed += 1
    return indexed


#: How many neighbours on each side a turn's window embedding reads (``Turn.context_embedding``):
#: two, where full text reads one (docs/decisions/0026: a wider window helps the vector list, and
#: blurs the text list).
CONTEXT_REACH = 2


def window_text(turns: Sequence[Turn], i: int, *, indexed: bool = False, reach: int = 1) -> str:
    """A turn with its ``reach`` neighbours on each side in the episode. A reply often only makes
    sense next to what it answers ("Yes, last Tuesday"), so the hot index searches turns in their
    local context (docs/decisions/0003). ``indexed``: as full text reads them (``Turn.index_text``)."""
    parts = [
        (indexed and turns[j].index_text) or turns[j].text
        for j in range(i - reach, i + reach + 1)
        if 0 <= j < len(turns)
    ]
    return "\n".join(parts)


def turn_documents(episode: Episode, turns: list[Turn]) -> list[TurnDoc]:
    """The hot documents of an episode's turns: window text, and the turn's own embedding
    blended with the embedding of its window (computed once, stored, refreshed when stale)."""
    embedder = embedder_for(episode.tenant)
    stale = [i for i, t in enumerate(turns) if t.context_embedding is None and t.embedding is not None]
    if stale and embedder.computes:
        vectors = embedder.embed([window_text(turns, i, reach=CONTEXT_REACH) for i in stale])
        for i, vector in zip(stale, vectors, strict=True):
            turns[i].context_embedding = vector
        Turn.objects.bulk_update([turns[i] for i in stale], ["context_embedding"])
    docs = []
    for i, turn in enumerate(turns):
        if turn.embedding is None:
            continue  # provided-vector turns without a vector stay out of the vector index
        own = np.asarray(turn.embedding, dtype=np.float32)
        if turn.context_embedding is not None:
            vector = own + np.asarray(turn.context_embedding, dtype=np.float32)
        else:
            # Caller-provided vectors: nothing to embed, so blend in the neighbours' own vectors.
            vector = own.copy()
            for j in (i - 1, i + 1):
                if 0 <= j < len(turns) and turns[j].embedding is not None:
                    vector += 0.5 * np.asarray(turns[j].embedding, dtype=np.float32)
        docs.append(TurnDoc(turn=turn, text=window_text(turns, i, indexed=True), vector=_normalise(vector)))
    return docs


def embed_turns(episode: Episode, turns: list[Turn], *, only_missing: bool = True) -> None:
    """Embed an episode's turns (those still without a vector, or all of them) and refresh its
    centroid. Async ingest indexes with it; unpacking re-embeds everything with it."""
    todo = [t for t in turns if t.embedding is None] if only_missing else list(turns)
    if not todo:
        return
    embedder = embedder_for(episode.tenant)
    if not embedder.computes:
        return  # provided vectors: nothing to compute; such turns stay out of the vector index
    vectors = embedder.embed([t.text for t in todo])
    for turn, vector in zip(todo, vectors, strict=True):
        turn.embedding = vector
    Turn.objects.bulk_update(todo, ["embedding"])
    episode.embedding = centroid([t.embedding for t in turns if t.embedding is not None])
    Episode.objects.for_tenant(episode.tenant_id).filter(pk=episode.pk).update(embedding=episode.embedding)


def hot_remove(episode: Episode) -> bool:
    turn_ids = list(episode.turns.values_list("id", flat=True))
    try:
        hot_store().remove_episode(episode.tenant_id.hex, episode.pk, turn_ids)
        return True
    except HotUnavailable as exc:
        logger.warning("could not remove episode %s from the hot index: %s", episode.pk, exc)
        Episode.objects.for_tenant(episode.tenant_id).filter(pk=episode.pk).update(needs_reindex=True)
        return False


def is_live_hot(layer: str, state: str) -> bool:
    """Whether an episode in this layer and state has documents in the hot index."""
    return layer == Layer.HOT and state != State.FORGOTTEN


def hot_remove_packed(episode: Episode) -> bool:
    """Remove a packed (or forgotten) episode's documents; clear its mark once Redis has let go."""
    if not hot_remove(episode):
        return False  # hot_remove has set needs_reindex: the next repair tries again
    (
        Episode.objects.for_tenant(episode.tenant_id)
        .filter(pk=episode.pk, needs_reindex=True)
        .exclude(layer=Layer.HOT, state__in=[State.ACTIVE, State.DORMANT, State.DELETE_CANDIDATE])
        .update(needs_reindex=False)
    )
    return True


def collect_hot_garbage(tenant: Tenant) -> None:
    """Purge the documents just taken out of the tenant's hot index from BM25's statistics now.
    RediSearch does it itself only every 30 s and past 100 removed documents; until then the
    removed ones count in document frequencies and lengths, and a tenant left with a few hot
    episodes is ranked by statistics of hundreds gone (docs/decisions/0002)."""
    try:
        hot_store().collect_garbage(tenant.id.hex)
    except HotUnavailable as exc:
        logger.warning("could not collect the hot index garbage of tenant %s: %s", tenant.pk, exc)


def drop_hot_on_tenant_delete(sender: Any, instance: Tenant, **kwargs: Any) -> None:
    """A deleted tenant's hot documents and index go with it, once the deletion commits (Postgres
    cascades the rest). With Redis down they stay behind, and the log says whose they are."""
    tenant_hex = instance.id.hex

    def drop() -> None:
        try:
            hot_store().drop_tenant(tenant_hex)
        except HotUnavailable as exc:
            logger.warning("deleted tenant %s: hot documents left in Redis: %s", tenant_hex, exc)

    transaction.on_commit(drop)


def rebuild_hot(*, tenant: Tenant | None = None, batch: int = 200, progress: Any = None) -> int:
    """Rebuild the hot index from Postgres: drop the tenant's documents, index every hot episode."""
    store = hot_store()
    tenants = [tenant] if tenant is not None else list(Tenant.objects.all())
    total = 0
    for t in tenants:
        store.drop_tenant(t.id.hex)
        ids = list(
            Episode.objects.filter(tenant=t, layer=Layer.HOT)
            .exclude(state=State.FORGOTTEN)
            .values_list("pk", flat=True)
        )
        for start in range(0, len(ids), batch):
            total += episodes_index_hot(t.pk, ids[start : start + batch])
            if progress:
                progress(t, min(start + batch, len(ids)), len(ids))
    if tenant is None:
        store.backfill_done()
    return total
