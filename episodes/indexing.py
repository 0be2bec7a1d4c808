"""The hot index, kept from Postgres: which documents an episode has in Redis, and writing them.

Postgres is the system of record; everything here can be rebuilt from it (`rebuild_hot`).
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from django.db import transaction
from django.db.models import Q

from memory_platform.conf import memory_settings
from memory_platform.embeddings import Embedder, embedder_for
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


def episodes_index_hot(
    tenant_id: Any, episode_ids: Sequence[int], *, written: Mapping[int, Sequence[Turn]] | None = None
) -> int:
    """Index the tenant's hot episodes among ``episode_ids`` (and their turns) in Redis from
    Postgres; clear their reindex mark.

    Turns still lacking an embedding (async ingest, an embedder that was down) are embedded
    first, all in one call of the embedder. Whatever the number of episodes, this is a fixed number
    of statements and two Redis round trips. Raises on Redis and embedding errors.

    ``written``: the turns, by episode, of episodes the caller has just created with them (an
    ingest's new episodes, at version 1), which are not read back; an episode that has changed
    since (a later version) is read as any other.
    """
    store = hot_store()
    episodes = list(
        Episode.objects.filter(tenant_id=tenant_id, pk__in=list(episode_ids), layer=Layer.HOT)
        .exclude(state=State.FORGOTTEN)
        .select_related("tenant")
    )
    if not episodes:
        return 0
    written = written or {}
    turns: dict[int, list[Turn]] = {}
    for episode in episodes:
        if episode.version == 1 and episode.pk in written:
            turns[episode.pk] = list(written[episode.pk])
    unread = [episode.pk for episode in episodes if episode.pk not in turns]
    turns.update((pk, []) for pk in unread)
    if unread:
        for turn in Turn.objects.filter(tenant_id=tenant_id, episode_id__in=unread).order_by(
            "episode_id", "seq", "id"
        ):
            turns[turn.episode_id].append(turn)
    embedder = embedder_for(episodes[0].tenant)
    if embedder.computes:
        _embed_missing(embedder, episodes, turns)
        windowed = fill_windows(embedder, [turns[episode.pk] for episode in episodes])
        if windowed:
            Turn.objects.bulk_update(windowed, ["context_embedding"])
    store.index_episodes(
        [(episode, turn_documents(episode, turns[episode.pk])) for episode in episodes],
        new=[pk for pk in turns if pk not in unread],
    )
    # Only clear the mark if nothing changed since we read the episode; otherwise the newer
    # write has queued (or will need) its own indexing.
    unchanged = functools.reduce(operator.or_, (Q(pk=e.pk, version=e.version) for e in episodes))
    Episode.objects.for_tenant(tenant_id).filter(unchanged).update(needs_reindex=False)
    return len(episodes)


def _embed_missing(embedder: Embedder, episodes: list[Episode], turns: Mapping[int, list[Turn]]) -> None:
    """Embed the turns without a vector, and refresh their episodes' centroids."""
    todo = [t for episode in episodes for t in turns[episode.pk] if t.embedding is None]
    if not todo:
        return
    vectors = embedder.embed([t.text for t in todo])
    for turn, vector in zip(todo, vectors, strict=True):
        turn.embedding = vector
    Turn.objects.bulk_update(todo, ["embedding"])
    touched = {t.episode_id for t in todo}
    changed = [episode for episode in episodes if episode.pk in touched]
    for episode in changed:
        episode.embedding = centroid([t.embedding for t in turns[episode.pk] if t.embedding is not None])
    Episode.objects.bulk_update(changed, ["embedding"])


#: How many neighbours on each side a turn's window embedding reads (``Turn.context_embedding``):
#: two, where full text reads one (docs/decisions/0026: a wider window helps the vector list, and
#: blurs the text list).
CONTEXT_REACH = 2


def window_vector(
    vectors: Sequence[np.ndarray | None], weights: Sequence[int], i: int, reach: int = CONTEXT_REACH
) -> np.ndarray | None:
    """The derived window vector of the ``i``-th of an episode's turns (``Turn.context_embedding``
    with ``MEMORY["WINDOW_VECTORS"] = "derived"``): the vectors of the turn and its ``reach``
    neighbours on each side, each times its weight (the length of its text: ``window_weight``),
    summed and normalised; None while one of them has no vector.

    The model's embedding of the window's text is the mean of its tokens' states, to which each
    turn gives about in proportion to its length; what it lacks is how the turns' words read in
    each other's company (cosine about 0.9 to the embedded window). In exchange the window's text,
    five turns long, never goes through the model
    (docs/decisions/0055-ingest-at-the-embedders-speed.md)."""
    window = range(max(0, i - reach), min(len(vectors), i + reach + 1))
    total: np.ndarray | None = None
    for j in window:
        vector = vectors[j]
        if vector is None:
            return None
        weighted = np.asarray(vector, dtype=np.float32) * float(weights[j])
        total = weighted if total is None else total + weighted
    return None if total is None else _normalise(total)


def window_weight(text: str) -> int:
    """How much of a window's embedding a turn of this text makes (``window_vector``): its length."""
    return max(1, len(text))


#: How window vectors are made (``MEMORY["WINDOW_VECTORS"]``): the window's text through the
#: embedder when the episode is indexed, or from the turns' own vectors (``window_vector``).
EMBEDDED, DERIVED = "embedded", "derived"


def set_windows(turns: Sequence[Turn], positions: Iterable[int]) -> None:
    """At ingest, the window vectors of the turns at ``positions`` among an episode's turns (in
    order), whose window the new turns make or change: derived at once, or left NULL for indexing
    to embed (``fill_windows``), after the commit, so no model runs while the scope is locked."""
    if memory_settings.WINDOW_VECTORS != DERIVED:
        for i in positions:
            turns[i].context_embedding = None
        return
    vectors = [t.embedding for t in turns]
    weights = [window_weight(t.text) for t in turns]
    for i in positions:
        turns[i].context_embedding = window_vector(vectors, weights, i)


def fill_windows(embedder: Embedder, episodes: Sequence[Sequence[Turn]]) -> list[Turn]:
    """Make the window vectors missing among the turns of ``episodes`` (each its turns in order):
    the windows' texts in one call of the embedder, or derived (``MEMORY["WINDOW_VECTORS"]``).
    Returns the turns given one, for the caller to save."""
    stale = [
        (turns, i)
        for turns in episodes
        for i, turn in enumerate(turns)
        if turn.context_embedding is None and turn.embedding is not None
    ]
    if not stale:
        return []
    if memory_settings.WINDOW_VECTORS == DERIVED:
        for turns in episodes:
            set_windows(turns, [i for owner, i in stale if owner is turns])
    else:
        texts = [window_text(turns, i, reach=CONTEXT_REACH) for turns, i in stale]
        for (turns, i), vector in zip(stale, embedder.embed(texts), strict=True):
            turns[i].context_embedding = vector
    return [turns[i] for turns, i in stale if turns[i].context_embedding is not None]


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
    blended with its window vector (``window_vector``: made once, stored, made again when stale)."""
    embedder = embedder_for(episode.tenant)
    if embedder.computes:
        filled = fill_windows(embedder, [turns])
        if filled:
            Turn.objects.bulk_update(filled, ["context_embedding"])
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
    episodes is ranked by statistics of hundreds gone (docs/decisions/0002). Only where BM25
    wraps meanwhile (``HotStore.idf_wraps``): a collection forks Redis (docs/decisions/0059)."""
    try:
        hot_store().collect_garbage(tenant.id.hex, only_if_needed=True)
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
