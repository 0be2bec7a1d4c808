"""`bench soak`: the platform in service for a while, watched for what grows.

For ``minutes`` the soak interleaves, at fixed rates, what an agent platform does all day on a few
tenants: ingest (turns in batches, with caller vectors, or embedded by the local model with
``embedder="local"``), searches (``search_shaped``, as ``POST /search``; accesses queued as the
view queues them), unpacks of warm and cold episodes (``POST /memories/{id}/unpack``), forgetting
what is older than a retention (``POST /forget``; the tick purges it after the grace period), and
each tenant's tick. Time is an input: a simulated clock runs ``days`` days over the run, and every
call takes it as ``now``, so the episodes cross the policy's thresholds (hot, warm, cold, forgotten,
purged) as they would over months. Once, at ``RESTART_AT`` of the run, the embedded Redis is
stopped, kept down ``OUTAGE_SECONDS`` and started again beside the work, which goes on: an
operation that fails is counted, never fatal.

Every ``interval`` minutes a sample: operations and errors in the interval, search p95, and what
``soak_probes`` reads. ``soak_report.verdict`` then judges the last half. The tenants are dropped
at the end, also when interrupted.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.utils import timezone

from episodes.models import Episode, Layer, State
from episodes.scope import Scope
from lifecycle.forgetting import forget_apply, forget_select
from lifecycle.services import turns_ingest
from lifecycle.tick import tick_run
from lifecycle.unpack import unpack
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.services import tenant_create
from retrieval import usage
from retrieval.query import SearchQuery
from retrieval.shaping import search_shaped
from rights.deletion import drop_tenant

from . import soak_probes, soak_report
from .ingest import WORDS, synthetic_turns

NAME = "bench-soak"
#: Turns per ingest call.
BATCH = 10
#: Turns each tenant holds before the clock starts, so the first searches find something.
SEED_TURNS = 200
#: Turns per session (a session's hot episodes are capped by the policy: conversations end).
SESSION_TURNS = 100
#: Seconds between two unpacks, and at most between two ticks of the same tenant (a short run
#: ticks each tenant at least ``TICKS_PER_TENANT`` times).
UNPACK_SECONDS = 2.0
TICK_SECONDS = 10.0
TICKS_PER_TENANT = 20
#: Episodes that began longer ago than this share of the simulated span are forgotten, and the
#: tick purges them ``purge_grace_days`` later. With the default span (300 days) that is 100
#: days, past the default policy's ``cold_days`` (90), so some episodes go cold before they are
#: forgotten; the tenants stop growing from about 43% of the run (100 + 30 days of grace).
RETAIN_SHARE = 1 / 3
#: The query vectors kept per tenant (a reservoir over everything ingested: old topics and new).
RESERVOIR = 200
#: When in the run Redis is restarted, and how long it stays down (about what a restart under a
#: tenant of 100,000 episodes takes: docs/benchmarks.md).
RESTART_AT = 0.45
OUTAGE_SECONDS = 5.0
KINDS = ("ingest", "search", "unpack", "forget", "tick")


@dataclass(frozen=True)
class SoakSettings:
    minutes: float = 60.0
    interval: float = 5.0
    tenants: int = 3
    seed: int = 7
    embedder: str = "provided"
    restart: bool = True
    days: float = 300.0
    turns_per_s: float = 20.0
    searches_per_s: float = 10.0

    def check(self) -> None:
        """A clear error before any work for settings that cannot run."""
        if self.minutes <= 0 or self.interval <= 0 or self.interval > self.minutes:
            raise ValueError("--minutes and --interval must be positive, the interval at most the run")
        if self.tenants < 1 or self.days <= 0 or self.turns_per_s <= 0 or self.searches_per_s <= 0:
            raise ValueError("--tenants, --days, --turns-per-s and --searches-per-s must be positive")
        if self.embedder not in ("provided", "local"):
            raise ValueError(f"--embedder is provided or local, not {self.embedder!r}")
        if self.restart and settings.EMBEDDED_REDIS is None:
            raise ValueError(
                "the soak restarts the embedded Redis once, and REDIS_URL names another Redis: "
                "pass --no-restart"
            )


@dataclass
class _Tenant:
    tenant: Tenant
    turns: int = 0
    vectors: list[np.ndarray] = field(default_factory=list)


@dataclass
class _Interval:
    """What happened since the last sample."""

    ops: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    degraded: int = 0


class _Restart(threading.Thread):
    """Stop the embedded Redis, keep it down ``OUTAGE_SECONDS``, start it (as `services` does)."""

    def __init__(self, minute: float, log: Callable[[str], None]) -> None:
        super().__init__(name="soak-redis-restart")
        self.minute, self.log = minute, log
        self.down = threading.Event()
        self.figures: dict[str, Any] = {"minute": round(minute, 2), "searches": 0, "degraded": 0, "errors": 0}

    def run(self) -> None:
        embedded = settings.EMBEDDED_REDIS
        assert embedded is not None  # SoakSettings.check
        try:
            began = time.perf_counter()
            self.down.set()
            embedded.stop()
            stopped = time.perf_counter()
            time.sleep(OUTAGE_SECONDS)
            restarting = time.perf_counter()
            embedded.start(timeout=120)
            self.figures.update(
                stop_s=round(stopped - began, 2),
                down_s=round(time.perf_counter() - began, 2),
                start_s=round(time.perf_counter() - restarting, 2),
            )
            self.log(f"  Redis back: {self.figures}")
        except Exception as exc:  # noqa: BLE001 - reported, the soak goes on
            self.figures.update(stop_s=None, down_s=None, start_s=None, error=f"{type(exc).__name__}: {exc}")
            self.log(f"  the Redis restart failed: {exc}")
        finally:
            self.down.clear()


class Soak:
    def __init__(self, config: SoakSettings, log: Callable[[str], None]) -> None:
        self.config, self.log = config, log
        self.rng = np.random.default_rng(config.seed)
        self.tenants: list[_Tenant] = []
        self.interval = _Interval()
        self.totals = _Interval()
        self.errors_seen: set[tuple[str, str]] = set()
        self.restart: _Restart | None = None
        self.began = 0.0
        self.clock_start = timezone.now()
        self.gin_support = ""

    # --- the clock -----------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.perf_counter() - self.began

    def now(self) -> datetime:
        share = self.elapsed() / (self.config.minutes * 60)
        return self.clock_start + timedelta(days=self.config.days * share)

    # --- the operations --------------------------------------------------------------------------
    def _ingest(self, state: _Tenant, now: datetime) -> None:
        made = synthetic_turns(BATCH, self.rng, with_vectors=self.config.embedder == "provided")
        turns = [
            dataclasses.replace(
                turn,
                occurred_at=now - timedelta(seconds=BATCH - k),
                scope=Scope.owner(user_id="soak", session_id=f"session-{(state.turns + k) // SESSION_TURNS}"),
            )
            for k, turn in enumerate(made)
        ]
        turns_ingest(tenant=state.tenant, turns=turns, now=now)
        for turn in turns:
            state.turns += 1
            if turn.vector is None:
                continue
            if len(state.vectors) < RESERVOIR:
                state.vectors.append(turn.vector)
            elif (slot := int(self.rng.integers(0, state.turns))) < RESERVOIR:
                state.vectors[slot] = turn.vector
        self.interval.ops["turns"] += len(turns)

    def _search(self, state: _Tenant, now: datetime) -> None:
        vector = None
        if state.vectors:
            near = state.vectors[int(self.rng.integers(0, len(state.vectors)))]
            noisy = near + 0.3 * self.rng.normal(size=near.shape).astype(np.float32)
            vector = noisy / np.linalg.norm(noisy)
        query = SearchQuery(
            text=" ".join(self.rng.choice(WORDS, size=3)), vector=vector, limit=10, record_access=False
        )
        tenant = state.tenant
        began = time.perf_counter()
        shaped = search_shaped(
            tenant=tenant,
            query=query,
            now=now,
            found=lambda ids, traversed: usage.recorder.add(tenant.id, ids, now, traversed),
        )
        self.interval.latencies.append((time.perf_counter() - began) * 1000)
        if shaped.result.degraded:
            self.interval.degraded += 1
            if self.restart is not None and self.restart.down.is_set():
                self.restart.figures["degraded"] += 1
        if self.restart is not None and self.restart.down.is_set():
            self.restart.figures["searches"] += 1

    def _unpack(self, state: _Tenant, now: datetime) -> bool:
        packed = (
            Episode.objects.for_tenant(state.tenant)
            .filter(layer__in=(Layer.WARM, Layer.COLD))
            .exclude(state=State.FORGOTTEN)
            .order_by("?")
            .values_list("pk", flat=True)
            .first()
        )
        if packed is None:
            return False  # nothing packed yet
        unpack(tenant=state.tenant, episode_id=packed, now=now, actor="bench-soak")
        return True

    def _forget(self, state: _Tenant, now: datetime) -> None:
        retain = timedelta(days=self.config.days * RETAIN_SHARE)
        old = forget_select(
            tenant=state.tenant, scope=Scope(occurred_to=now - retain), retrievability_below=None, now=now
        )
        self.interval.ops["forget"] += len(
            forget_apply(tenant=state.tenant, episode_ids=old[:500], now=now, actor="bench-soak")
        )

    def _tick(self, state: _Tenant, now: datetime) -> None:
        run = tick_run(tenant=state.tenant, now=now)
        if run.errors:
            self.interval.errors["tick (episodes)"] += len(run.errors)

    def _do(self, kind: str, state: _Tenant) -> None:
        """One operation; a failure is counted (its first occurrence logged) and the soak goes on."""
        now = self.now()
        try:
            if kind == "ingest":
                self._ingest(state, now)
            elif kind == "search":
                self._search(state, now)
            elif kind == "unpack":
                if not self._unpack(state, now):
                    return
            elif kind == "forget":
                self._forget(state, now)
                return  # counted by episodes
            else:
                self._tick(state, now)
        except Exception as exc:  # noqa: BLE001 - counted: the soak is about what goes wrong
            self.interval.errors[kind] += 1
            if self.restart is not None and self.restart.down.is_set():
                self.restart.figures["errors"] += 1
            seen = (kind, type(exc).__name__)
            if seen not in self.errors_seen:
                self.errors_seen.add(seen)
                self.log(f"  {kind} failed at minute {self.elapsed() / 60:.2f} (first of its kind): {exc!r}")
            return
        self.interval.ops[kind] += 1

    # --- the run ---------------------------------------------------------------------------------
    def setup(self) -> None:
        config = self.config
        self.log(f"creating {config.tenants} tenant(s) ({config.embedder} vectors), {SEED_TURNS} turns each")
        for _ in range(config.tenants):
            tenant = tenant_create(name=f"{NAME}-{uuid.uuid4().hex[:8]}", embedder=config.embedder)
            self.tenants.append(_Tenant(tenant))
        batches = SEED_TURNS // BATCH
        for state in self.tenants:
            for b in range(batches):
                self._ingest(state, self.clock_start - timedelta(minutes=batches - b))
        self.interval = _Interval()

    def sample(self, minute: float) -> dict[str, Any]:
        interval, self.interval = self.interval, _Interval()
        for kind in KINDS:
            self.totals.ops[kind] += interval.ops[kind]
        self.totals.ops["turns"] += interval.ops["turns"]
        self.totals.errors.update(interval.errors)
        latencies = np.asarray(interval.latencies)
        return {
            "minute": round(minute, 2),
            "simulated_day": round((self.now() - self.clock_start).total_seconds() / 86_400, 1),
            "ops": {kind: interval.ops[kind] for kind in (*KINDS[:1], "turns", *KINDS[1:])},
            "errors": dict(interval.errors),
            "degraded": interval.degraded,
            "search_p50_ms": round(float(np.percentile(latencies, 50)), 2) if latencies.size else None,
            "search_p95_ms": round(float(np.percentile(latencies, 95)), 2) if latencies.size else None,
            **soak_probes.read_all([s.tenant for s in self.tenants], self.gin_support),
        }

    def run(self, row: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
        config = self.config
        self.gin_support = soak_probes.gin_support()
        duration = config.minutes * 60
        periods = {
            "ingest": BATCH / config.turns_per_s,
            "search": 1 / config.searches_per_s,
            "unpack": UNPACK_SECONDS,
            "tick": min(TICK_SECONDS, duration / TICKS_PER_TENANT) / len(self.tenants),
        }
        due = dict.fromkeys(periods, 0.0)
        rotation = Counter[str]()
        samples: list[dict[str, Any]] = []
        self.began = time.perf_counter()
        samples.append(self.sample(0.0))
        row(samples[-1])
        next_sample = config.interval * 60
        while True:
            at = self.elapsed()
            if at >= min(next_sample, duration):
                # A row is named by the minute it was due, not the moment the operation under way
                # let it be taken (on a loaded machine, a few seconds later).
                samples.append(self.sample(min(next_sample, duration) / 60))
                row(samples[-1])
                if at >= duration:
                    break
                next_sample += config.interval * 60
                continue
            if config.restart and self.restart is None and at >= RESTART_AT * duration:
                self.log(
                    f"  restarting the embedded Redis (down {OUTAGE_SECONDS:g} s) at minute {at / 60:.2f}"
                )
                self.restart = _Restart(at / 60, self.log)
                self.restart.start()
            kind = min(due, key=due.__getitem__)
            if due[kind] > at:
                time.sleep(min(due[kind], next_sample, duration) - at)
                continue
            # Behind schedule, the rate drops rather than a backlog building up (an interval's
            # operation counts show it).
            due[kind] = max(due[kind] + periods[kind], at)
            state = self.tenants[rotation[kind] % len(self.tenants)]
            rotation[kind] += 1
            if kind == "tick":
                self._do("forget", state)
            self._do(kind, state)
        if self.restart is not None:
            self.restart.join()
        return samples

    def teardown(self) -> None:
        """Let the restart finish, write the queued accesses, drop the tenants."""
        if self.restart is not None:
            self.restart.join()
        try:
            usage.recorder.flush()
        except Exception as exc:  # noqa: BLE001 - the tenants go anyway
            self.log(f"  could not write the queued accesses: {exc}")
        self.log(f"dropping {len(self.tenants)} tenant(s)")
        for state in self.tenants:
            drop_tenant(state.tenant, now=timezone.now(), log=lambda line: self.log(f"  {line}"))


def run_soak(
    config: SoakSettings, log: Callable[[str], None], row: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Run the soak (``row`` is told each sample as it is taken), judge it, drop its tenants (also
    when interrupted)."""
    soak = Soak(config, log)
    try:
        soak.setup()
        log(
            f"soaking {config.minutes:g} min: {config.turns_per_s:g} turns/s, {config.searches_per_s:g} "
            f"searches/s, an unpack every {UNPACK_SECONDS:g} s, each tenant ticked every "
            f"{min(TICK_SECONDS, config.minutes * 60 / TICKS_PER_TENANT):g} s, "
            f"{config.days:g} simulated days"
            + (f", Redis restarted at {RESTART_AT:.0%}" if config.restart else ", no Redis restart")
        )
        samples = soak.run(row)
    finally:
        soak.teardown()
    return {
        "settings": dataclasses.asdict(config),
        "tenants": [state.tenant.name for state in soak.tenants],
        "samples": samples,
        "restart": soak.restart.figures if soak.restart is not None else None,
        "totals": {"ops": dict(soak.totals.ops), "errors": dict(soak.totals.errors)},
        "gin_support": soak.gin_support,
        "verdict": soak_report.verdict(samples),
    }
