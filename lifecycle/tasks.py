"""Worker tasks: thin and idempotent. A tick holds the tenant's lock, so a task retried while the
first attempt still runs records a skipped tick instead of doing the work twice."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from memory_platform.locks import advisory_lock
from memory_platform.tenancy.models import Tenant

from .models import read_policy
from .tick import tick_run

if TYPE_CHECKING:
    from django_q.models import Schedule

SCHEDULE_PREFIX = "lifecycle.tick:"
SELF_SCHEDULE = "lifecycle.schedule_ticks"
REPAIR_SCHEDULE = "episodes.repair_hot_index"
SNAPSHOT_SCHEDULE = "lifecycle.take_snapshots"
SNAPSHOT_EVERY = timedelta(minutes=60)


def tick_tenant(tenant_id: str) -> dict[str, Any]:
    tenant = Tenant.objects.filter(pk=tenant_id, is_active=True).first()
    if tenant is None:
        return {"status": "no such active tenant", "tenant": tenant_id}
    run = tick_run(tenant=tenant, now=timezone.now())
    return {"status": run.status, "tick_run": run.pk, "counts": run.counts}


def take_snapshots() -> dict[str, int]:
    """Every active tenant's figures, for the console's charts (hourly; kept 90 days by default)."""
    from .stats import take_snapshots as take

    return take(timezone.now())


def schedule_ticks() -> dict[str, int]:
    """Make the django-q2 schedules match the tenants: one tick schedule per active tenant at its
    policy's `tick_interval_minutes`, none for others; the hot index repair every minute; the
    tenants' snapshots every hour; and this function itself every 10 minutes, so new tenants and
    edited intervals are picked up. Safe to call any number of times.

    It runs when the platform starts, so it also takes the snapshot of each tenant that has none
    from the last hour (a new tenant, or a platform that was stopped): the console's charts and
    its figures over a day start from there rather than from the next hourly snapshot.

    Every node runs it at its start (`bin/run`), and a worker every 10 minutes: one at a time, or
    two nodes starting together would both find a schedule missing and both make it (django-q2
    does not keep names unique), and a tenant would tick twice as often."""
    with advisory_lock(SELF_SCHEDULE, wait=True):
        return _schedule_ticks()


def _schedule_ticks() -> dict[str, int]:
    from django_q.models import Schedule

    from .stats import take_snapshots as take

    now = timezone.now()
    take(now, older_than=SNAPSHOT_EVERY)

    created = updated = removed = 0
    wanted: set[str] = set()
    for tenant in Tenant.objects.filter(is_active=True):
        name = f"{SCHEDULE_PREFIX}{tenant.pk}"
        wanted.add(name)
        minutes = int(read_policy(tenant).tick_interval_minutes)
        schedule, made, doubles = _schedule(
            name,
            {
                "func": "lifecycle.tasks.tick_tenant",
                "args": repr(str(tenant.pk)),
                "schedule_type": Schedule.MINUTES,
                "minutes": minutes,
                "repeats": -1,
                # A new tenant's first tick comes one interval after it is scheduled, as every
                # later one does: not at once, so that the tenants made together (an import,
                # an evaluation) are not all ticked together, and a tenant's first interval
                # is as its policy says (`manage.py tick` ticks it now).
                "next_run": now + timedelta(minutes=minutes),
            },
        )
        removed += doubles
        if made:
            created += 1
        elif schedule.minutes != minutes or schedule.schedule_type != Schedule.MINUTES:
            schedule.schedule_type = Schedule.MINUTES
            schedule.minutes = minutes
            schedule.save(update_fields=["schedule_type", "minutes"])
            updated += 1
    stale = Schedule.objects.filter(name__startswith=SCHEDULE_PREFIX).exclude(name__in=wanted)
    removed += stale.delete()[0]
    for name, func, minutes in (
        (REPAIR_SCHEDULE, "episodes.tasks.repair_hot_index", 1),
        (SELF_SCHEDULE, "lifecycle.tasks.schedule_ticks", 10),
        (SNAPSHOT_SCHEDULE, "lifecycle.tasks.take_snapshots", int(SNAPSHOT_EVERY.total_seconds() // 60)),
    ):
        _, _, doubles = _schedule(
            name, {"func": func, "schedule_type": Schedule.MINUTES, "minutes": minutes, "repeats": -1}
        )
        removed += doubles
    return {"created": created, "updated": updated, "removed": removed}


def _schedule(name: str, defaults: dict[str, Any]) -> tuple[Schedule, bool, int]:
    """The schedule called ``name`` (made from ``defaults`` when missing), whether it was made,
    and how many copies of it were deleted: the oldest is kept, the others are what two nodes
    starting together left before this ran one at a time."""
    from django_q.models import Schedule

    found = list(Schedule.objects.filter(name=name).order_by("pk"))
    if not found:
        return Schedule.objects.create(name=name, **defaults), True, 0
    doubles = Schedule.objects.filter(pk__in=[s.pk for s in found[1:]]).delete()[0] if found[1:] else 0
    return found[0], False, doubles
