"""JSON lines into a tenant, for operators (the API's ``POST /import`` without its size limit)."""

import json
import sys
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from lifecycle.quota import PinnedCapExceeded
from memory_platform.tenancy.models import Tenant
from rights.records import FormatError
from rights.sources import FORMATS, import_body


class Command(BaseCommand):
    help = (
        "Import a file into TENANT: this platform's export, mem0 memories or JSON lines of turns "
        "(read off the file unless --format says). Idempotent; checked whole before anything is written."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("tenant", help="the tenant's name")
        parser.add_argument("file", help="the file to import ('-' for standard input)")
        parser.add_argument("--format", choices=FORMATS)

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        tenant = Tenant.objects.filter(name=opts["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant named {opts['tenant']!r}")
        try:
            body = sys.stdin.buffer.read() if opts["file"] == "-" else Path(opts["file"]).read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {opts['file']}: {exc}") from exc

        started = time.monotonic()

        def progress(done: int, total: int, what: str) -> None:
            rate = done / max(time.monotonic() - started, 1e-9)
            self.stderr.write(f"\r{done}/{total} {what}, {rate:,.0f} {what}/s", ending="")

        try:
            report = import_body(
                tenant=tenant,
                body=body,
                fmt=opts["format"],
                now=timezone.now(),
                actor="cli",
                progress=progress,
            )
        except (FormatError, PinnedCapExceeded) as exc:
            raise CommandError(f"nothing was imported: {exc}") from exc
        self.stderr.write("")
        self.stdout.write(json.dumps(report.as_json(), indent=2))
