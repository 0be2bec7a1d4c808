"""Work that must run once across every process and node: a Postgres advisory lock by name.

The web nodes and workers share nothing but Postgres and Redis, so a lock that must hold across
them lives in one of the two; Postgres, because the work it guards (the index repair, the
schedules) is what runs while Redis is lost (docs/operations.md#several-nodes). The lock is held by
the session, across the block's transactions, and released at its end, or by Postgres when the
connection drops with a killed process: it never outlives its holder. Behind PgBouncer this needs
session pooling (in transaction pooling the unlock may reach another server connection).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from django.db import connection

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def advisory_lock(name: str, *, wait: bool = False) -> Iterator[bool]:
    """Hold the lock ``name`` for the block. Yields whether it is held: False when another
    session holds it (only without ``wait``; with it, the block waits for the lock)."""
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [name])
            held = True
        else:
            cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [name])
            held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            _unlock(name)


def _unlock(name: str) -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [name])
    except Exception:  # an aborted transaction cannot unlock: closing the session does
        logger.exception("could not release the lock %r; closing the connection", name)
        connection.close()
