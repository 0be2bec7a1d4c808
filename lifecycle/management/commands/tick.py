"""`manage.py tick [--tenant NAME] [--now ISO]`: run the lifecycle tick now, print what moved."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from lifecycle.tick import STEPS, TickInterrupted, tick_run
from memory_platform.tenancy.models import Tenant


def parse_now(value: str) -> datetime:
    parsed = parse_datetime(value)
    if parsed is None:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise CommandError(f"--now must be an ISO 8601 date or datetime, got {value!r}") from None
    return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Run the lifecycle tick (docs/concepts.md#the-tick) for one tenant or every active tenant, at --now "
        "(default: the current time), and print the counts per transition."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="tenant name (default: every active tenant)")
        parser.add_argument("--now", help="ISO 8601 time the tick computes with, e.g. 2026-03-01T12:00:00Z")
        parser.add_argument("--fail-after-step", choices=STEPS, help="fault injection, for drills")

    def handle(self, *args: Any, **opts: Any) -> None:
        now = parse_now(opts["now"]) if opts["now"] else timezone.now()
        if opts["tenant"]:
            tenants = list(Tenant.objects.filter(name=opts["tenant"]))
            if not tenants:
                raise CommandError(f"no tenant named {opts['tenant']!r}")
        else:
            tenants = list(Tenant.objects.filter(is_active=True))
        failed = 0
        for tenant in tenants:
            try:
                run = tick_run(tenant=tenant, now=now, fail_after_step=opts["fail_after_step"])
            except TickInterrupted as exc:
                self.stderr.write(f"{tenant.name}: {exc}")
                failed += 1
                continue
            counts = ", ".join(f"{name} {n}" for name, n in sorted(run.counts.items())) or "nothing to do"
            self.stdout.write(
                f"{tenant.name}: {run.status} in {run.duration_ms} ms at {now.isoformat()}: {counts}"
            )
            for error in run.errors:
                self.stderr.write(
                    f"  error in {error['step']} (episode {error['episode']}): {error['error']}"
                )
        if failed:
            raise CommandError(f"{failed} tick(s) failed")
