"""The lifecycle tick (DESIGN §4): score, move episodes between layers, mark states and candidates.

One tick per tenant at a time (a Postgres advisory lock), ``now`` is an argument, and every episode
moves in its own transaction guarded by the optimistic version check: the episode is read (version
v), compressed with no lock held, then written only ``WHERE version = v``. If anything touched it
meanwhile (a search recorded an access, a turn arrived) the update matches no row and the move is
abandoned, as seed 001 asks. Redis follows each commit; ``hot_repair`` at the start of every tick
puts it right after a crash, so running a tick again always converges.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from episodes.models import Episode, Layer, State
from episodes.selectors import degrees
from episodes.stores.hot import HotUnavailable
from memory_platform.tenancy.models import Tenant

from . import scoring
from .compression import WarmShape, get_summariser, warm_points_for_age
from .hotsync import hot_remove_packed, hot_repair, retag_state, sync_episode
from .journal import CONTENT_FIELDS, journal_record, snapshot, to_json
from .models import AccessWindow, MemoryPolicy, TickRun, policy_for

logger = logging.getLogger(__name__)

STEPS = (
    "repair",
    "score",
    "promote",
    "hot_to_warm",
    "warm_gradient",
    "warm_to_cold",
    "states",
    "candidates",
    "purge",
)
SEARCH_TEXT_LIMIT = 200_000
#: Windows of unused packed episodes slide forward at most once a day (an UPDATE per window per day).
WINDOW_SLIDE = timedelta(days=1)


class TickInterrupted(Exception):
    """Raised by fault injection: the tick stops here, as if the process had died."""


FaultHook = Callable[[str], None]


def _days(now: datetime, then: datetime | None) -> float:
    return max(0.0, (now - then).total_seconds() / 86_400) if then is not None else 0.0


def _merge(old: Iterable[str], new: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in [*old, *new]:
        if item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out


@dataclass
class Tick:
    tenant: Tenant
    policy: MemoryPolicy
    now: datetime
    run: TickRun
    hook: FaultHook | None = None
    counts: Counter[str] = field(default_factory=Counter)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.summariser = get_summariser(self.policy)

    # --- bookkeeping ---------------------------------------------------------------------------
    def checkpoint(self, label: str) -> None:
        if self.hook is not None:
            self.hook(label)

    def error(self, step: str, episode_id: int | None, exc: BaseException) -> None:
        logger.warning("tick %s: %s failed for episode %s: %s", self.run.pk, step, episode_id, exc)
        self.errors.append(
            {"step": step, "episode": episode_id, "error": f"{type(exc).__name__}: {exc}"[:500]}
        )

    def journal(self, episode: Episode, action: str, before: dict[str, Any], after: dict[str, Any]) -> None:
        journal_record(
            tenant=self.tenant,
            episode=episode,
            action=action,
            before=before,
            after=after,
            now=self.now,
            actor="tick",
            tick_run=self.run,
        )

    # --- reading -------------------------------------------------------------------------------
    def episodes(self, **filters: Any) -> list[Episode]:
        return list(
            Episode.objects.visible()
            .filter(tenant=self.tenant)
            .filter(**filters)
            .defer("embedding", "search_text")
        )

    def scored(self, episodes: list[Episode]) -> dict[int, tuple[float, scoring.EpisodeStats]]:
        """Scores are computed here, every tick, and never stored (seed 002 safety rule)."""
        degree = degrees([e.pk for e in episodes])
        out = {}
        for e in episodes:
            stats = scoring.EpisodeStats.from_episode(e, *degree.get(e.pk, (0, 0)))
            out[e.pk] = (scoring.activity_score(stats, self.policy, self.now), stats)
        return out

    def fresh(self, episode_id: int, version: int) -> Episode | None:
        """The whole row, if it is still the version the decision was made on."""
        episode = Episode.objects.filter(tenant=self.tenant, pk=episode_id).select_related("tenant").first()
        if episode is None or episode.version != version or episode.state == State.FORGOTTEN:
            self.counts["abandoned"] += 1
            return None
        return episode

    def write(self, episode: Episode, expected_layer: str, **fields: Any) -> bool:
        """The optimistic write: only if nobody touched the episode since it was read."""
        updated = (
            Episode.objects.filter(pk=episode.pk, version=episode.version, layer=expected_layer)
            .exclude(state=State.FORGOTTEN)
            .update(version=F("version") + 1, **fields)
        )
        if not updated:
            self.counts["abandoned"] += 1
        return bool(updated)


# --- the steps ---------------------------------------------------------------------------------------
def step_repair(t: Tick) -> None:
    try:
        fixed = hot_repair(tenant=t.tenant, limit=max(10_000, 2 * t.policy.hot_quota))
    except HotUnavailable as exc:
        # Postgres steps still run; every Redis change they miss is marked and repaired next time.
        t.error("repair", None, exc)
        return
    t.counts["redis_removed"] += fixed["removed"]
    t.counts["redis_indexed"] += fixed["indexed"]


def step_score(t: Tick) -> None:
    scored = t.scored(t.episodes())
    t.counts["scored"] = len(scored)


def step_promote(t: Tick) -> None:
    """Upward migration by use: `promote_after_accesses` accesses within `hot_days` (seed 001)."""
    tenant, now = t.tenant, t.now
    # A window with no new access restarts, so it begins at most a day before the first new one.
    AccessWindow.objects.filter(
        tenant=tenant, started_at__lt=now - WINDOW_SLIDE, episode__access_count=F("access_count_at_start")
    ).update(started_at=now)
    unwatched = (
        Episode.objects.visible()
        .filter(tenant=tenant)
        .exclude(layer=Layer.HOT)
        .filter(access_window__isnull=True)
    )
    AccessWindow.objects.bulk_create(
        [
            AccessWindow(tenant=tenant, episode_id=pk, started_at=now, access_count_at_start=count)
            for pk, count in unwatched.values_list("pk", "access_count")
        ],
        ignore_conflicts=True,
    )
    used = (
        AccessWindow.objects.filter(tenant=tenant, episode__access_count__gt=F("access_count_at_start"))
        .exclude(episode__layer=Layer.HOT)
        .exclude(episode__state=State.FORGOTTEN)
        .select_related("episode")
    )
    for window in used:
        episode = window.episode
        gained = episode.access_count - window.access_count_at_start
        if now - window.started_at > timedelta(days=t.policy.hot_days):
            # Too slow to count as "active use": start a new window from here.
            AccessWindow.objects.filter(pk=window.pk).update(
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
    turns_text = "\n".join(episode.turns.order_by("seq", "id").values_list("text", flat=True))
    t.checkpoint(f"compressed:{episode.pk}")
    with transaction.atomic():
        before = snapshot(episode)
        fields = {
            "layer": Layer.HOT,
            "restored_at": t.now,
            "search_text": turns_text[:SEARCH_TEXT_LIMIT],
            "needs_reindex": True,
        }
        if not t.write(episode, episode.layer, **fields):
            return
        AccessWindow.objects.filter(episode=episode).delete()
        after = {"layer": Layer.HOT, "restored_at": t.now, "reason": "repeated_use", "accesses": gained}
        t.journal(episode, "promote", before, after)
        t.counts[f"{episode.layer}_to_hot"] += 1
        transaction.on_commit(lambda: sync_episode(episode.pk))


def _hot_evictions(t: Tick, hot: list[Episode], scores: dict[int, tuple[float, Any]]) -> dict[int, str]:
    """Which hot episodes leave, and why: idle (the policy's layer rule), then the per-session cap,
    then the tenant's hot quota; lowest activity score (then least recently used) leaves first."""
    leaving: dict[int, str] = {}
    for e in hot:
        if not e.anchor and scoring.layer_for(scores[e.pk][1], t.policy, t.now) != Layer.HOT:
            leaving[e.pk] = "idle"

    def order(e: Episode) -> tuple[float, datetime, int]:
        return (scores[e.pk][0], e.last_accessed_at, e.pk)

    staying = [e for e in hot if e.pk not in leaving]
    sessions: dict[tuple[str, str, str], list[Episode]] = defaultdict(list)
    for e in staying:
        if e.session_id:
            sessions[(e.user_id, e.agent_id, e.session_id)].append(e)
    for members in sessions.values():
        excess = len(members) - t.policy.hot_cap_per_session
        for e in sorted((m for m in members if not m.anchor), key=order)[: max(0, excess)]:
            leaving[e.pk] = "session_cap"
    staying = [e for e in staying if e.pk not in leaving]
    excess = len(staying) - t.policy.hot_quota
    for e in sorted((s for s in staying if not s.anchor), key=order)[: max(0, excess)]:
        leaving[e.pk] = "hot_quota"
    return leaving


def step_hot_to_warm(t: Tick) -> None:
    hot = t.episodes(layer=Layer.HOT)
    scores = t.scored(hot)
    by_id = {e.pk: e for e in hot}
    for episode_id, reason in sorted(_hot_evictions(t, hot, scores).items()):
        episode = t.fresh(episode_id, by_id[episode_id].version)
        if episode is None:
            continue
        try:
            _demote_to_warm(t, episode, reason)
        except TickInterrupted:
            raise
        except Exception as exc:
            t.error("hot_to_warm", episode_id, exc)


def _demote_to_warm(t: Tick, episode: Episode, reason: str) -> None:
    turns = list(episode.turns.order_by("seq", "id").only("text", "embedding"))
    vectors = None
    if turns and all(turn.embedding is not None for turn in turns):
        vectors = np.stack([np.asarray(turn.embedding, dtype=np.float32) for turn in turns])
    shape = t.summariser.warm([turn.text for turn in turns], embeddings=vectors)
    idle = _days(t.now, episode.last_accessed_at)
    shape = shape.with_points(warm_points_for_age(idle, t.policy))
    # Entities and decisions are kept whole (seed 003 F3): what ingest found plus what the summariser found.
    warm = WarmShape(
        shape.summary,
        shape.key_points,
        _merge(episode.entities, shape.entities),
        _merge(episode.decisions, shape.decisions),
    )
    t.checkpoint(f"compressed:{episode.pk}")
    with transaction.atomic():
        before = snapshot(episode)
        fields = {
            "layer": Layer.WARM,
            "summary": warm.summary,
            "key_points": warm.key_points,
            "entities": warm.entities,
            "decisions": warm.decisions,
            "search_text": warm.text()[:SEARCH_TEXT_LIMIT],
            "packed_chars": warm.chars,
            # Redis still holds its documents until the removal after commit succeeds.
            "needs_reindex": True,
        }
        if not t.write(episode, Layer.HOT, **fields):
            return
        AccessWindow.objects.update_or_create(
            episode=episode,
            defaults={"tenant": t.tenant, "started_at": t.now, "access_count_at_start": episode.access_count},
        )
        after = {k: fields[k] for k in ("layer", "summary", "key_points", "packed_chars")}
        t.journal(episode, "hot_to_warm", before, {**after, "reason": reason, "source": shape.source})
        t.counts["hot_to_warm"] += 1

        def leave_hot() -> None:
            t.checkpoint(f"moved:{episode.pk}")
            hot_remove_packed(episode)

        transaction.on_commit(leave_hot)


def step_warm_gradient(t: Tick) -> None:
    """Seed 001: compression deepens with age; fewer key points as the episode idles."""
    for listed in t.episodes(layer=Layer.WARM, anchor=False):
        keep = warm_points_for_age(_days(t.now, listed.last_accessed_at), t.policy)
        if len(listed.key_points) <= keep:
            continue
        episode = t.fresh(listed.pk, listed.version)
        if episode is None:
            continue
        warm = WarmShape(episode.summary, episode.key_points[:keep], episode.entities, episode.decisions)
        with transaction.atomic():
            before = snapshot(episode, ("key_points", "search_text", "packed_chars"))
            fields = {"key_points": warm.key_points, "search_text": warm.text(), "packed_chars": warm.chars}
            if t.write(episode, Layer.WARM, **fields):
                after = {"key_points": warm.key_points, "packed_chars": warm.chars, "kept": keep}
                t.journal(episode, "warm_gradient", before, after)
                t.counts["warm_gradient"] += 1


def step_warm_to_cold(t: Tick) -> None:
    warm = t.episodes(layer=Layer.WARM, anchor=False)  # anchors never go cold (seed 003 §4.6)
    scores = t.scored(warm)
    for listed in warm:
        if scoring.layer_for(scores[listed.pk][1], t.policy, t.now) != Layer.COLD:
            continue
        episode = t.fresh(listed.pk, listed.version)
        if episode is None:
            continue
        try:
            _demote_to_cold(t, episode)
        except TickInterrupted:
            raise
        except Exception as exc:
            t.error("warm_to_cold", episode.pk, exc)


def _demote_to_cold(t: Tick, episode: Episode) -> None:
    cold = t.summariser.cold(
        WarmShape(episode.summary, episode.key_points, episode.entities, episode.decisions)
    )
    t.checkpoint(f"compressed:{episode.pk}")
    with transaction.atomic():
        before = snapshot(episode)
        # The warm copy (summary, key points) stays on the row: unpacking and rollback need nothing else.
        fields = {
            "layer": Layer.COLD,
            "headline": cold.headline[:200],
            "keywords": [tag[:100] for tag in cold.tags],
            "search_text": cold.text(),
            "packed_chars": cold.chars,
        }
        if t.write(episode, Layer.WARM, **fields):
            t.journal(
                episode,
                "warm_to_cold",
                before,
                {**{k: v for k, v in fields.items() if k != "search_text"}, "source": cold.source},
            )
            t.counts["warm_to_cold"] += 1


def step_states(t: Tick) -> None:
    """Seed 002 states. A delete candidate is only marked (and proposed to an operator)."""
    from .candidates import propose_delete, withdraw_delete

    episodes = t.episodes()
    scores = t.scored(episodes)
    for listed in episodes:
        # Anchors never decay (seed 003 §4.6): always in default search, never a candidate.
        new = State.ACTIVE if listed.anchor else scoring.state_of(scores[listed.pk][1], t.policy, t.now)
        if new == listed.state:
            continue
        old = listed.state
        with transaction.atomic():
            if not t.write(listed, listed.layer, state=new):
                continue
            after: dict[str, Any] = {"state": new, "score": round(scores[listed.pk][0], 6)}
            if new == State.DELETE_CANDIDATE:
                after["candidate_id"] = propose_delete(t.tenant, listed, scores[listed.pk][0], t.now)
            if old == State.DELETE_CANDIDATE:
                after["withdrawn_candidates"] = withdraw_delete(t.tenant, listed, t.now)
            t.journal(listed, "state", {"state": old}, after)
            t.counts[f"{old}_to_{new}"] += 1
            if listed.layer == Layer.HOT:
                # Redis filters default searches by state: its tag must follow.
                transaction.on_commit(functools.partial(retag_state, listed, new))


def step_candidates(t: Tick) -> None:
    from .candidates import propose_merges

    episodes = t.episodes(anchor=False)
    made = propose_merges(t, episodes, t.scored(episodes))
    t.counts["merge_candidates"] += made


def step_purge(t: Tick) -> None:
    from .forgetting import purge_forgotten

    purged, failed = purge_forgotten(
        tenant=t.tenant, now=t.now, grace_days=t.policy.purge_grace_days, run=t.run
    )
    t.counts["purged"] += purged
    for episode_id, exc in failed:
        t.error("purge", episode_id, exc)


STEP_FUNCTIONS: dict[str, Callable[[Tick], None]] = {
    "repair": step_repair,
    "score": step_score,
    "promote": step_promote,
    "hot_to_warm": step_hot_to_warm,
    "warm_gradient": step_warm_gradient,
    "warm_to_cold": step_warm_to_cold,
    "states": step_states,
    "candidates": step_candidates,
    "purge": step_purge,
}


# --- the run -----------------------------------------------------------------------------------------
def _lock_key(tenant: Tenant) -> str:
    return f"lifecycle.tick:{tenant.id}"


def _try_lock(tenant: Tenant) -> bool:
    # A session-level advisory lock: held across the tick's many short transactions, released by
    # the unlock below or, if the process dies, by Postgres when the connection drops.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [_lock_key(tenant)])
        return bool(cursor.fetchone()[0])


def _unlock(tenant: Tenant) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [_lock_key(tenant)])
    except Exception:  # an aborted transaction cannot unlock; closing the connection will
        logger.exception("could not release the tick lock of %s; closing the connection", tenant.pk)
        connection.close()


def tick_run(
    *,
    tenant: Tenant,
    now: datetime,
    fail_after_step: str | None = None,
    hook: FaultHook | None = None,
    steps: Iterable[str] | None = None,
) -> TickRun:
    """Run steps 1-9 of DESIGN §4 for one tenant at ``now``; returns the recorded TickRun.

    ``fail_after_step`` (a name from STEPS) and ``hook`` (called with "after:<step>",
    "compressed:<id>" before a move is written and "moved:<id>" between its commit and Redis) inject
    faults; an exception from either stops the tick, is recorded, and is raised again.
    """
    wanted = tuple(steps) if steps is not None else STEPS
    unknown = sorted(set(wanted) - set(STEPS))
    if unknown or (fail_after_step is not None and fail_after_step not in STEPS):
        raise ValueError(f"unknown tick step(s) {unknown or [fail_after_step]}; steps are {list(STEPS)}")
    policy = policy_for(tenant)
    run = TickRun.objects.create(tenant=tenant, now_used=now, started_at=timezone.now())
    started = time.perf_counter()
    if not _try_lock(tenant):
        run.status = TickRun.Status.SKIPPED
        run.errors = [{"step": "lock", "episode": None, "error": "another tick of this tenant is running"}]
        _finish(run, started)
        return run
    tick = Tick(tenant=tenant, policy=policy, now=now, run=run, hook=hook)
    try:
        for step in STEPS:
            if step not in wanted:
                continue
            STEP_FUNCTIONS[step](tick)
            tick.checkpoint(f"after:{step}")
            if fail_after_step == step:
                raise TickInterrupted(f"fault injected after step {step!r}")
        run.status = TickRun.Status.SUCCEEDED
    except BaseException as exc:
        run.status = TickRun.Status.FAILED
        tick.error("tick", None, exc)
        raise
    finally:
        _unlock(tenant)
        run.counts = to_json({k: v for k, v in sorted(tick.counts.items()) if v})
        run.errors = tick.errors
        _finish(run, started)
    return run


def _finish(run: TickRun, started: float) -> None:
    run.finished_at = timezone.now()
    run.duration_ms = int((time.perf_counter() - started) * 1000)
    run.save(update_fields=["status", "counts", "errors", "finished_at", "duration_ms"])


__all__ = ["CONTENT_FIELDS", "STEPS", "TickInterrupted", "tick_run"]
