"""The tick's layer decisions (docs/concepts.md#the-tick: promote, hot_to_warm, warm_gradient,
warm_to_cold): which
episodes move, and what they pack into. The moves themselves are ``transitions``'.

Each episode is read at version v and compressed with no lock held; the transition then writes it
only if it is still at version v.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.db import transaction

from episodes.models import Episode, Layer
from memory_platform import db

from . import scoring, transitions
from .compression import ColdShape, WarmShape, warm_points_for_age
from .journal import snapshot
from .listing import micros_of
from .models import AccessWindow
from .tenant_policy import Policy
from .tick_context import Tick, TickInterrupted, days_between

#: Windows of unused packed episodes slide forward at most once a day (an UPDATE per window per day).
WINDOW_SLIDE = timedelta(days=1)
_WINDOWS = AccessWindow._meta.db_table


def _merge(old: Iterable[str], new: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in [*old, *new]:
        if item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out


def step_promote(t: Tick) -> None:
    """Upward migration by use: `promote_after_accesses` accesses within `hot_days`.

    Decided on the tick's listing (each episode's layer and running access count) and one read of
    the tenant's windows, as plain columns: an anti-join of the tenant's packed episodes against
    its windows was planned as a nested loop whenever the windows' statistics were older than the
    tenant (28 ms a tenant of 1,000), and the windows as model rows cost 15 ms more in Python."""
    tenant, now = t.tenant, t.now
    listing = t.listing()
    if not listing.ids.size:
        return
    found = db.fetch(
        f"SELECT id, episode_id, {micros_of('started_at')}, access_count_at_start FROM {_WINDOWS} WHERE tenant_id = %s",
        [tenant.pk],
        tenant=tenant,
    )
    columns = list(zip(*found, strict=True)) or [(), (), (), ()]
    window_ids, episode_ids, started, at_start = (np.asarray(c, dtype=np.int64) for c in columns)
    at, listed = listing.rows_of(episode_ids)  # a forgotten (or gone) episode's window waits
    count = np.where(listed, listing.stats.access_count[at], -1)
    packed = listed & (listing.layer[at] != Layer.HOT)
    # A window with no new access restarts, so it begins at most a day before the first new one.
    idle = listed & (count == at_start) & (started < scoring.micros(now - WINDOW_SLIDE))
    if idle.any():
        with db.cursor(tenant) as cursor:
            cursor.execute(
                f"UPDATE {_WINDOWS} SET started_at = %s WHERE tenant_id = %s AND id = ANY(%s)",
                [now, tenant.pk, window_ids[idle].tolist()],
            )
    visible = listing.rows()
    unwatched = visible[(listing.layer[visible] != Layer.HOT) & ~np.isin(listing.ids[visible], episode_ids)]
    AccessWindow.objects.bulk_create(
        [
            AccessWindow(tenant=tenant, episode_id=pk, started_at=now, access_count_at_start=n)
            for pk, n in zip(
                listing.ids[unwatched].tolist(), listing.stats.access_count[unwatched].tolist(), strict=True
            )
        ],
        ignore_conflicts=True,
    )
    used = packed & (count > at_start)
    if not used.any():
        return
    windows = {
        int(pk): (int(window), scoring.moment_of(int(began)), int(n))
        for pk, window, began, n in zip(
            episode_ids[used], window_ids[used], started[used], at_start[used], strict=True
        )
    }
    # The whole rows, as they are now: a promotion unpacks them.
    fresh = Episode.objects.visible().filter(tenant=tenant, pk__in=list(windows)).exclude(layer=Layer.HOT)
    for episode in fresh.order_by("pk"):
        episode.tenant = tenant  # journal entries name it
        window_id, started_at, count_at_start = windows[episode.pk]
        gained = episode.access_count - count_at_start
        if now - started_at > timedelta(days=t.policy.hot_days):
            # Too slow to count as "active use": start a new window from here.
            AccessWindow.objects.for_tenant(tenant).filter(pk=window_id).update(
                started_at=now, access_count_at_start=episode.access_count
            )
        elif gained >= t.policy.promote_after_accesses:
            try:
                _promote(t, episode, gained)
            except TickInterrupted:
                raise
            except Exception as exc:
                t.error("promote", episode.pk, exc)


def _promote(t: Tick, episode: Episode, gained: int) -> None:
    previous = episode.layer
    if transitions.promote(episode, reason="use", move=t.move, note={"accesses": gained}):
        t.moved(episode)
        t.counts[f"{previous}_to_hot"] += 1
    else:
        t.counts["abandoned"] += 1


def _hot_evictions(t: Tick, hot: np.ndarray) -> dict[int, str]:
    """Which hot episodes (positions in the tick's listing) leave, and why: idle (the policy's
    layer rule), then the per-session cap, then the tenant's hot quota (in episodes, then in
    bytes); lowest activity score (then least recently used) leaves first."""
    listing = t.listing()
    ids, anchor, scores = listing.ids.tolist(), listing.anchor, listing.scores
    last_accessed = listing.stats.last_accessed_at
    layers = scoring.layers_for(listing.stats, hot, t.policy, t.now)
    leaving: dict[int, str] = {}
    for i, layer in zip(hot.tolist(), layers.tolist(), strict=True):
        if not anchor[i] and layer != Layer.HOT:
            leaving[i] = "idle"

    def order(i: int) -> tuple[float, int, int]:
        return (float(scores[i]), int(last_accessed[i]), ids[i])

    staying = [i for i in hot.tolist() if i not in leaving]
    sessions: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i in staying:
        user, agent, session = listing.session[i]
        if session:
            sessions[(user, agent, session)].append(i)
    for members in sessions.values():
        excess = len(members) - t.policy.hot_cap_per_session
        for i in sorted((m for m in members if not anchor[m]), key=order)[: max(0, excess)]:
            leaving[i] = "session_cap"
    staying = [i for i in staying if i not in leaving]
    excess = len(staying) - t.policy.hot_quota
    for i in sorted((s for s in staying if not anchor[s]), key=order)[: max(0, excess)]:
        leaving[i] = "hot_quota"
    # The quota in bytes, as ingest keeps it (lifecycle.quota), here by the same order as above.
    weight = sum(int(listing.hot_bytes[i]) for i in hot.tolist() if i not in leaving)
    for i in sorted((s for s in staying if not anchor[s] and s not in leaving), key=order):
        if weight <= t.policy.hot_quota_bytes:
            break
        leaving[i] = "hot_quota"
        weight -= int(listing.hot_bytes[i])
    return {ids[i]: reason for i, reason in leaving.items()}


#: How many episodes the tick packs before it writes them. Their documents then leave Redis
#: together and the tenant's index is collected once: searches meanwhile never meet BM25
#: statistics that still count removed documents (``transitions.leave_hot``), and a batch costs
#: one collection, not one per episode.
HOT_TO_WARM_BATCH = 32


def step_hot_to_warm(t: Tick) -> None:
    listing = t.listing()
    leaving = sorted(_hot_evictions(t, listing.rows(layer=Layer.HOT)).items())
    for start in range(0, len(leaving), HOT_TO_WARM_BATCH):
        batch = leaving[start : start + HOT_TO_WARM_BATCH]
        # The versions the decisions were made on, read before the first of the batch is packed.
        listed = [(pk, int(listing.version[listing.position[pk]]), reason) for pk, reason in batch]
        _hot_to_warm_batch(t, listed)


def _hot_to_warm_batch(t: Tick, batch: list[tuple[int, int, str]]) -> None:
    """Pack each episode of the batch (no lock held), then write each one still at the version
    read, then take the written ones out of Redis together."""
    packed: list[tuple[Episode, WarmShape, str]] = []
    for pk, version, reason in batch:
        episode = t.fresh(pk, version)
        if episode is None:
            continue
        try:
            packed.append((episode, warm_shape(episode, t.summariser, t.policy, t.now), reason))
        except TickInterrupted:
            raise
        except Exception as exc:
            t.error("hot_to_warm", episode.pk, exc)
    written: list[Episode] = []
    try:
        for episode, warm, reason in packed:
            try:
                moved = transitions.demote_to_warm(
                    episode, warm, move=t.move, reason=reason, source=warm.source, leaving=written
                )
            except TickInterrupted:
                raise
            except Exception as exc:
                t.error("hot_to_warm", episode.pk, exc)
                continue
            if moved:
                t.moved(episode)
            t.counts["hot_to_warm" if moved else "abandoned"] += 1
    finally:
        transitions.leave_hot(t.move, written, collect=True)


def warm_shape(episode: Episode, summariser: Any, policy: Policy, now: datetime) -> WarmShape:
    """What a hot episode packs into: the summariser's summary and key points, as many points as its idle time
    allows (the warm gradient), entities and decisions kept whole (docs/concepts.md#the-warm-shape): what
    ingest found plus what the summariser found."""
    # With "episode": the related manager matches each turn to its episode by it, and a deferred
    # episode_id would be read row by row.
    turns = list(episode.turns.order_by("seq", "id").only("text", "embedding", "episode"))
    vectors = None
    if turns and all(turn.embedding is not None for turn in turns):
        vectors = np.stack([np.asarray(turn.embedding, dtype=np.float32) for turn in turns])
    shape = summariser.warm([turn.text for turn in turns], embeddings=vectors)
    shape = shape.with_points(warm_points_for_age(days_between(now, episode.last_accessed_at), policy))
    return WarmShape(
        shape.summary,
        shape.key_points,
        _merge(episode.entities, shape.entities),
        _merge(episode.decisions, shape.decisions),
        shape.source,
    )


def cold_shape(episode: Episode, summariser: Any) -> ColdShape:
    """What a warm episode packs into: a headline and tags from its warm shape."""
    return summariser.cold(
        WarmShape(episode.summary, episode.key_points, episode.entities, episode.decisions)
    )


def _days_idle(t: Tick, rows: np.ndarray) -> list[float]:
    """``days_between(now, last_accessed_at)`` of the listed episodes at ``rows``, exactly."""
    now = scoring.micros(t.now)
    last = t.listing().stats.last_accessed_at[rows].tolist()
    return [max(0.0, (now - then) / 1_000_000 / 86_400) for then in last]


def step_warm_gradient(t: Tick) -> None:
    """The warm gradient: compression deepens with age; fewer key points as the episode idles."""
    listing = t.listing()
    warm = listing.rows(layer=Layer.WARM, anchor=False)
    # No fewer key points than the gradient's least are ever asked of an episode.
    warm = warm[listing.key_points[warm] > min(t.policy.warm_points_min, t.policy.warm_points_max)]
    for i, idle in zip(warm.tolist(), _days_idle(t, warm), strict=True):
        keep = warm_points_for_age(idle, t.policy)
        if listing.key_points[i] <= keep:
            continue
        episode = t.fresh(int(listing.ids[i]), int(listing.version[i]))
        if episode is None:
            continue
        shape = WarmShape(episode.summary, episode.key_points[:keep], episode.entities, episode.decisions)
        with transaction.atomic():
            before = snapshot(episode, ("key_points", "search_text", "packed_chars"))
            fields = {
                "key_points": shape.key_points,
                "search_text": shape.text(),
                "packed_chars": shape.chars,
            }
            if t.write(episode, Layer.WARM, **fields):
                after = {"key_points": shape.key_points, "packed_chars": shape.chars, "kept": keep}
                t.journal(episode, "warm_gradient", before, after)
                t.counts["warm_gradient"] += 1


def step_warm_to_cold(t: Tick) -> None:
    listing = t.listing()
    warm = listing.rows(layer=Layer.WARM, anchor=False)  # anchors never go cold (pinned)
    going = warm[scoring.layers_for(listing.stats, warm, t.policy, t.now) == Layer.COLD]
    for i in going.tolist():
        episode = t.fresh(int(listing.ids[i]), int(listing.version[i]))
        if episode is None:
            continue
        try:
            _demote_to_cold(t, episode)
        except TickInterrupted:
            raise
        except Exception as exc:
            t.error("warm_to_cold", episode.pk, exc)


def _demote_to_cold(t: Tick, episode: Episode) -> None:
    if transitions.demote_to_cold(episode, cold_shape(episode, t.summariser), move=t.move):
        t.moved(episode)
        t.counts["warm_to_cold"] += 1
    else:
        t.counts["abandoned"] += 1
