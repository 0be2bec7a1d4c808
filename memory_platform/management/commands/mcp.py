"""`manage.py mcp`: the platform's MCP tools over stdio, for an MCP client that starts the server
itself (Claude Desktop, an IDE, an agent framework). The key is ``MEMORY_API_KEY``; stdout carries
the protocol and nothing else (logs go to stderr)."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import OperationalError

from memory_platform.mcp.dispatch import ApiError, Caller, local_host
from memory_platform.mcp.tools import build_server
from memory_platform.tenancy.models import Tenant
from memory_platform.warmup import warm_up


class Command(BaseCommand):
    help = (
        "Serve the MCP tools (remember, recall, context, forget, unpack) over stdio; key from MEMORY_API_KEY."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        key = os.environ.get("MEMORY_API_KEY", "").strip()
        if not key:
            raise CommandError("set MEMORY_API_KEY to the API key whose tenant the tools work in")
        caller = Caller(
            authorization=f"Bearer {key}",
            host=local_host(),
            scheme="https" if settings.HTTPS else "http",
        )
        try:
            whoami = caller.call("GET", "/whoami")
        except ApiError as exc:
            raise CommandError(f"MEMORY_API_KEY was refused: {exc}") from None
        except OperationalError as exc:
            raise CommandError(
                f"cannot reach Postgres ({exc}); start the servers first: `make run` or "
                "`manage.py services start`"
            ) from None
        # Loaded before the client's first call, not during it (``memory_platform.warmup``).
        tenant = Tenant.objects.filter(name=whoami["tenant"]).first()
        warm_up(lambda line: self.stderr.write(line), embedders=[tenant.embedder] if tenant else [])
        self.stderr.write(f"MCP over stdio for tenant {whoami['tenant']} (key {whoami['key_prefix']})")
        build_server(lambda ctx: caller).run("stdio")
