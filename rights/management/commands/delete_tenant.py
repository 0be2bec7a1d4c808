"""`manage.py delete_tenant NAME [--yes]`: delete a tenant and everything it holds, in every store,
and print the receipt (``rights.deletion``). Asks first on a terminal; elsewhere it needs ``--yes``."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from memory_platform.tenancy.models import Tenant
from rights.deletion import DeletionRefused, tenant_delete
from rights.erasure import tenant_holdings

#: Who the audit records a deletion made here as.
ACTOR = "cli"


class Command(BaseCommand):
    help = (
        "Delete a tenant for good: its memory in Redis and Postgres, its queued tasks, policy, keys "
        "and operators; its audit records stay, with one more for the deletion. Prints what went."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the tenant's name")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        parser.add_argument("--json", action="store_true", help="print the receipt as one JSON line")

    def handle(self, *args: Any, **opts: Any) -> None:
        name = opts["name"]
        tenant = Tenant.objects.filter(name=name).first()
        if tenant is None:
            raise CommandError(f"no tenant named {name!r}; nothing was deleted")
        if not opts["yes"]:
            self._confirm(tenant)
        try:
            deletion = tenant_delete(
                tenant=tenant, now=timezone.now(), actor=ACTOR, log=lambda line: self.stderr.write(line)
            )
        except DeletionRefused as exc:
            raise CommandError(f"{exc}; nothing was deleted") from None
        if opts["json"]:
            self.stdout.write(json.dumps(deletion.as_json()))
        else:
            for line in deletion.lines():
                self.stdout.write(line)
        if not deletion.clean:
            raise CommandError("the check after the deletion found something left: see the receipt")

    def _confirm(self, tenant: Tenant) -> None:
        if not sys.stdin.isatty():
            raise CommandError(
                f"not deleting {tenant.name!r}: standard input is not a terminal to confirm on; "
                "add --yes to delete without asking"
            )
        holdings = {k: v for k, v in tenant_holdings(tenant).items() if v}
        held = ", ".join(f"{n} {label}" for label, n in holdings.items()) or "no memory"
        self.stdout.write(f"tenant {tenant.name} ({tenant.pk}) holds {held}.")
        answer = input(f"Delete it and all it holds, for good? Type its name ({tenant.name}) to confirm: ")
        if answer.strip() != tenant.name:
            raise CommandError("not confirmed; nothing was deleted")
