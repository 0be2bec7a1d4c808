"""What a command that reads the platform's tables checks first."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def require_migrated() -> None:
    """A clear error, before any work, when the database lacks migrations (a fresh checkout that
    never ran ``make run``), instead of a traceback from the first query."""
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        first = pending[0][0]
        raise CommandError(
            f"the database lacks {len(pending)} migration(s), starting with {first.app_label}.{first.name}: "
            "run `make run` once, or `.venv/bin/python manage.py migrate`"
        )
