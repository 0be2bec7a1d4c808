"""The lifecycle tick (docs/concepts.md#the-tick): score, move episodes between layers, mark states and
candidates.

One tick per tenant at a time (a Postgres advisory lock), ``now`` is an argument, and every episode moves in
its own transaction guarded by the optimistic version check: the episode is read (version v), compressed with
no lock held, then written only ``WHERE version = v``. If anything touched it meanwhile (a search recorded an
access, a turn arrived) the update matches no row and the move is abandoned (docs/concepts.md#halt-on-touch).
Redis follows the commits (a batch of moves leaves it together, and the tenant's index is collected at once:
docs/decisions/0033); ``hot_repair`` at the start of every tick puts it right after a crash, so running a tick
again always converges.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Annotated, Any, TypedDict

from django.db import connection, transaction
from django.utils import timezone
from typing_extensions import Doc

from episodes.indexing import collect_hot_garbage
from episodes.models import Layer, State
from episodes.stores.hot import HotUnavailable
from memory_platform import counters
from memory_platform.tenancy.models import Tenant

from . import scoring
from .candidates import propose_delete, propose_merges, withdraw_delete
from .compression import ExtractiveSummariser
from .forgetting import purge_due, purge_forgotten
from .hotsync import hot_repair, retag_state
from .journal import to_json
from .models import Candidate, JournalEntry, TickRun, read_policy
from .moves import step_hot_to_warm, step_promote, step_warm_gradient, step_warm_to_cold
from .tenant_policy import Policy
from .tick_context import FaultHook, Tick, TickError, TickInterrupted

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
    if fixed["removed"]:
        collect_hot_garbage(t.tenant)  # as after a batch of moves (transitions.leave_hot)


def step_score(t: Tick) -> None:
    t.counts["scored"] = len(t.listing())


def step_states(t: Tick) -> None:
    """States from the activity score. A delete candidate is only marked (and proposed to an operator)."""
    listing = t.listing()
    rows = listing.rows()
    new_states = scoring.states_of(listing.stats, listing.scores, t.policy, t.now)[rows]
    # Anchors never decay (docs/concepts.md#anchors-pinned-memories): always in default search, never a
    # candidate.
    new_states[listing.anchor[rows]] = State.ACTIVE
    changing = rows[new_states != listing.state[rows]]
    new_of = dict(zip(rows.tolist(), new_states.tolist(), strict=True))
    found = t.instances([int(pk) for pk in listing.ids[changing]])
    retagged = 0
    for i in changing.tolist():
        listed = found.get(int(listing.ids[i]))
        if listed is None or listed.version != listing.version[i]:
            t.counts["abandoned"] += 1  # touched or gone since it was listed: the next tick decides
            continue
        new, old, score = new_of[i], listed.state, float(listing.scores[i])
        with transaction.atomic():
            if not t.write(listed, listed.layer, state=new):
                continue
            after: dict[str, Any] = {"state": new, "score": round(score, 6)}
            if new == State.DELETE_CANDIDATE:
                after["candidate_id"] = propose_delete(t.tenant, listed, score, t.now)
            if old == State.DELETE_CANDIDATE:
                after["withdrawn_candidates"] = withdraw_delete(t.tenant, listed, t.now)
            t.journal(listed, "state", {"state": old}, after)
            t.counts[f"{old}_to_{new}"] += 1
            if listed.layer == Layer.HOT:
                # Redis filters default searches by state: its tag must follow.
                transaction.on_commit(functools.partial(retag_state, listed, new))
                retagged += 1
    if retagged:
        # A retag rewrites the episode's documents; the copies it replaced leave BM25's
        # statistics now (see transitions.leave_hot).
        collect_hot_garbage(t.tenant)


def step_candidates(t: Tick) -> None:
    t.counts["merge_candidates"] += propose_merges(t)


def step_purge(t: Tick) -> None:
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


@contextlib.contextmanager
def tick_lock(tenant: Tenant, *, wait: float, poll: float = 0.5) -> Iterator[bool]:
    """Hold the tenant's tick lock, so that no tick of it runs meanwhile (one that starts records a
    skipped run); waits up to ``wait`` seconds for a running tick to finish. Yields whether the
    lock was taken (False: a tick still runs). Held by this connection until the block ends."""
    deadline = time.monotonic() + wait
    held = _try_lock(tenant)
    while not held and time.monotonic() < deadline:
        time.sleep(poll)
        held = _try_lock(tenant)
    try:
        yield held
    finally:
        if held:
            _unlock(tenant)


def tick_run(
    *,
    tenant: Tenant,
    now: datetime,
    fail_after_step: str | None = None,
    hook: FaultHook | None = None,
    steps: Iterable[str] | None = None,
) -> TickRun:
    """Run the steps (``STEPS``, docs/concepts.md#the-tick) for one tenant at ``now``; returns the recorded
    TickRun.

    ``fail_after_step`` (a name from STEPS) and ``hook`` (called with "after:<step>",
    "compressed:<id>" before a move is written and "moved:<id>" between its commit and Redis) inject
    faults; an exception from either stops the tick, is recorded, and is raised again.
    """
    wanted = tuple(steps) if steps is not None else STEPS
    unknown = sorted(set(wanted) - set(STEPS))
    if unknown or (fail_after_step is not None and fail_after_step not in STEPS):
        raise ValueError(f"unknown tick step(s) {unknown or [fail_after_step]}; steps are {list(STEPS)}")
    policy = read_policy(tenant)
    run = TickRun.objects.create(tenant=tenant, now_used=now, started_at=timezone.now())
    started = time.perf_counter()
    if not _try_lock(tenant):
        run.status = TickRun.Status.SKIPPED
        run.errors = [{"step": "lock", "episode": None, "error": "another tick of this tenant is running"}]
        _finish(run, started)
        return run
    _close_interrupted(tenant, run)
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


def _close_interrupted(tenant: Tenant, current: TickRun) -> int:
    """Close the runs a killed process left `running`. Called with the tenant's tick lock held, so
    no other tick of the tenant is running: any other `running` record is one whose process died
    (its lock went with its connection)."""
    return (
        TickRun.objects.filter(tenant=tenant, status=TickRun.Status.RUNNING)
        .exclude(pk=current.pk)
        .update(
            status=TickRun.Status.FAILED,
            finished_at=timezone.now(),
            errors=[
                {"step": "tick", "episode": None, "error": "interrupted: the process running it stopped"}
            ],
        )
    )


def _finish(run: TickRun, started: float) -> None:
    run.finished_at = timezone.now()
    run.duration_ms = int((time.perf_counter() - started) * 1000)
    run.save(update_fields=["status", "counts", "errors", "finished_at", "duration_ms"])
    counters.write(
        run.tenant_id,
        counts=[("ticks", {"status": run.status}, 1), ("tick_errors", {}, len(run.errors))],
        observations=[("tick_ms", {}, run.duration_ms)],
    )


# --- the preview -------------------------------------------------------------------------------------
class _Discard(Exception):
    """Raised to roll back a preview's transaction."""


#: The steps a preview runs as the tick does. Not the two that change Redis directly: the repair
#: (what it would do does not depend on the policy) and the purge (counted instead, below).
PREVIEW_STEPS = tuple(step for step in STEPS if step not in {"repair", "purge"})


class TickBusy(Exception):
    """Another tick (or preview) of the tenant holds its lock."""


class SampledEpisode(TypedDict):
    id: str
    title: str
    session_id: str
    layer: Annotated[str, Doc("its layer before this change")]
    last_accessed_at: str


class TickPreview(TypedDict):
    """What a tick would do (``tick_preview``)."""

    now: str
    counts: Annotated[dict[str, int], Doc("moves per step, as a tick run counts them")]
    scored: Annotated[int, Doc("episodes scored")]
    errors: list[TickError]
    samples: Annotated[
        dict[str, list[SampledEpisode]], Doc("per kind of change (a step, state:a->b, candidate:kind)")
    ]


def tick_preview(
    *, tenant: Tenant, now: datetime, policy: Policy | None = None, sample: int = 5
) -> TickPreview:
    """What a tick at ``now`` would do under ``policy`` (an unsaved one from a form or a request,
    else the tenant's), without writing anything: the tick's own steps run in one transaction that
    is then rolled back, with the Redis changes they queue for the commit. Returns the moves per
    step (as a tick run's ``counts``), errors, and for each kind of change a sample of the episodes
    behind it (from the journal entries the steps wrote, read before the rollback).

    The extractive summariser stands in for an LLM one (what moves does not depend on the words);
    rows the steps change stay locked until the rollback. Raises TickBusy while a tick runs."""
    policy = policy or read_policy(tenant)
    if not _try_lock(tenant):
        raise TickBusy(f"a tick of {tenant.name} is running; preview again when it is done")
    result: TickPreview | None = None
    try:
        with transaction.atomic():
            run = TickRun.objects.create(tenant=tenant, now_used=now, started_at=timezone.now())
            tick = Tick(tenant=tenant, policy=policy, now=now, run=run)
            tick.summariser = ExtractiveSummariser(policy)
            last_candidate = (
                Candidate.objects.for_tenant(tenant).order_by("-pk").values_list("pk", flat=True).first() or 0
            )
            for step in PREVIEW_STEPS:
                STEP_FUNCTIONS[step](tick)
            tick.counts["purged"] += purge_due(tenant, now, policy.purge_grace_days).count()
            result = {
                "now": now.isoformat(),
                "counts": {k: v for k, v in sorted(tick.counts.items()) if v and k != "scored"},
                "scored": tick.counts["scored"],
                "errors": tick.errors,
                "samples": _samples(run, last_candidate, sample),
            }
            raise _Discard
    except _Discard:
        pass
    finally:
        _unlock(tenant)
    assert result is not None  # set before the rollback
    return result


def _samples(run: TickRun, last_candidate: int, size: int) -> dict[str, list[SampledEpisode]]:
    """Up to ``size`` episodes per kind of change the run journaled, and per candidate kind."""
    samples: dict[str, list[SampledEpisode]] = {}
    entries = JournalEntry.objects.filter(tick_run=run).select_related("episode").order_by("pk")
    for entry in entries:
        kind = (
            entry.action
            if entry.action != "state"
            else f"state:{entry.before.get('state')}->{entry.after.get('state')}"
        )
        bucket = samples.setdefault(kind, [])
        if len(bucket) < size and entry.episode is not None:
            # the layer before this change (the row holds where the whole tick left it)
            bucket.append(_described(entry.episode, entry.before.get("layer")))
    proposed = Candidate.objects.filter(tenant=run.tenant, pk__gt=last_candidate)
    for candidate in proposed.select_related("episode").order_by("pk"):
        bucket = samples.setdefault(f"candidate:{candidate.kind}", [])
        if len(bucket) < size:
            bucket.append(_described(candidate.episode, None))
    return samples


def _described(episode: Any, layer: str | None) -> SampledEpisode:
    return {
        "id": episode.public_id,
        "title": episode.title,
        "session_id": episode.session_id,
        "layer": layer or episode.layer,
        "last_accessed_at": episode.last_accessed_at.isoformat(),
    }


__all__ = ["PREVIEW_STEPS", "STEPS", "TickBusy", "TickInterrupted", "tick_preview", "tick_run"]
