"""A tenant's memory as JSON lines, for operators (the API's ``GET /export`` without its key)."""

import sys
from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from memory_platform.tenancy.audit import EXPORT, audit_record
from memory_platform.tenancy.models import Tenant
from rights.export import ExportFilter, export_lines


def _when(value: str | None) -> datetime | None:
    if value is None:
        return None
    parsed = parse_datetime(value)
    if parsed is None:
        raise CommandError(f"not an ISO 8601 time: {value!r}")
    return parsed if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Export TENANT's memory as JSON lines (to --output, or standard output); progress on standard error."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("tenant", help="the tenant's name")
        parser.add_argument("--output", "-o", help="file to write (default: standard output)")
        parser.add_argument("--user-id")
        parser.add_argument("--session-id")
        parser.add_argument("--since", help="episodes that went on at or after this ISO 8601 time")
        parser.add_argument("--until", help="episodes that began before this ISO 8601 time")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        tenant = Tenant.objects.filter(name=opts["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant named {opts['tenant']!r}")
        filters = ExportFilter(
            user_id=opts["user_id"],
            session_id=opts["session_id"],
            since=_when(opts["since"]),
            until=_when(opts["until"]),
        )
        now = timezone.now()
        audit_record(tenant=tenant, action=EXPORT, actor="cli", now=now, filters=filters.as_json())

        def progress(done: int, total: int) -> None:
            self.stderr.write(f"\r{done}/{total} episodes", ending="")

        out = open(opts["output"], "w", encoding="utf-8") if opts["output"] else sys.stdout  # noqa: SIM115
        lines = 0
        try:
            for line in export_lines(tenant=tenant, filters=filters, now=now, progress=progress):
                out.write(line)
                lines += 1
        finally:
            if out is not sys.stdout:
                out.close()
        self.stderr.write(f"\nexported {tenant.name}: {lines} lines")
