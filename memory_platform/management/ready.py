"""What a command that reads the platform's tables checks first."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

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


@contextlib.contextmanager
def interruptible(write: Callable[[str], object], what: str) -> Iterator[None]:
    """Ctrl-C during a long command ends it with one line and exit code 130, not a traceback;
    the command's own ``finally`` blocks (dropping the tenants it made) have run by then."""
    try:
        yield
    except KeyboardInterrupt:
        write(f"interrupted: {what}")
        raise SystemExit(130) from None
