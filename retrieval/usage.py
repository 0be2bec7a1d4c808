"""Usage counting off the request path.

A search answers first; the accesses it caused are queued here and written by one background thread per
process, many searches in one statement per tenant (``write_usage``). The counts are the same as one ``record_access``
per search: each access adds one to ``access_count`` (each traversal to ``traverse_count``), bumps ``version``
(a layer move in flight sees the touch and abandons: docs/concepts.md#halt-on-touch) and sets
``last_accessed_at`` to the ``now`` of the latest queued use.

What it trades: a process that dies loses the accesses queued in its last fraction of a second
(``MEMORY_USAGE_FLUSH_SECONDS``). Usage counts steer ranking and demotion; they are not memory.
Inside a transaction (tests, ``ATOMIC_REQUESTS``) the write is immediate, on the caller's own
connection, because another connection would not see the caller's rows yet.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import close_old_connections, connection

from episodes.stores import rows
from memory_platform.conf import memory_settings

logger = logging.getLogger(__name__)

# Queued episodes beyond this are written at once by the caller instead of waiting for the thread.
MAX_PENDING = 50_000


@dataclass
class _Use:
    accesses: int = 0
    traversals: int = 0
    at: datetime | None = None


def write_usage(uses: dict[tuple[uuid.UUID, int], _Use]) -> int:
    """Write queued uses, one statement per tenant (``episodes.stores.rows.uses_add``)."""
    return rows.uses_add(
        {key: rows.Use(use.accesses, use.traversals, use.at) for key, use in uses.items() if use.at}
    )


class UsageRecorder:
    """Queues uses and writes them in batches from a daemon thread (started on first use, and
    again in a forked child)."""

    def __init__(self, interval: float | None = None) -> None:
        self._interval = interval
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one batch at a time: the latest `now` wins in order
        self._pending: dict[tuple[uuid.UUID, int], _Use] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0

    @property
    def interval(self) -> float:
        return float(self._interval if self._interval is not None else memory_settings.USAGE_FLUSH_SECONDS)

    def add(
        self,
        tenant_id: uuid.UUID,
        episode_ids: Iterable[int],
        now: datetime,
        traversed: Iterable[int] = (),
    ) -> None:
        if connection.in_atomic_block:
            # The caller's transaction holds rows no other connection can see yet: write here.
            record(tenant_id, episode_ids, now, traversed)
            return
        with self._lock:
            _merge(self._pending, tenant_id, episode_ids, traversed, now)
            overflowing = len(self._pending) >= MAX_PENDING
            self._ensure_thread()
        if overflowing:
            self.flush()
        else:
            self._wake.set()

    def flush(self) -> int:
        """Write everything queued now; returns the episodes updated. On a database error the
        batch goes back to the queue (merged with what came meanwhile) and the error is raised."""
        with self._flush_lock:
            with self._lock:
                batch, self._pending = self._pending, {}
            if not batch:
                return 0
            try:
                return write_usage(batch)
            except Exception:
                with self._lock:
                    for key, use in batch.items():
                        queued = self._pending.setdefault(key, _Use())
                        queued.accesses += use.accesses
                        queued.traversals += use.traversals
                        queued.at = queued.at or use.at  # a newer queued `now` stays
                raise

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def stop(self) -> None:
        """Write what is queued and end the thread (at exit; before a test database is dropped)."""
        thread = self._thread
        if thread is not None and thread.is_alive() and self._pid == os.getpid():
            self._stop.set()
            self._wake.set()
            thread.join(timeout=30)
        self._thread = None
        self._stop.clear()
        try:
            self.flush()
        except Exception:
            logger.exception("usage counts could not be written at shutdown")

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
            return
        self._pid = os.getpid()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="usage-recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._wake.wait()
                # Gather the uses of the next moment into one write.
                self._stop.wait(self.interval)
                self._wake.clear()
                close_old_connections()
                try:
                    self.flush()
                except Exception:
                    logger.exception("usage counts not written; retrying in %.1fs", self.interval)
        finally:
            connection.close()


def record(
    tenant_id: uuid.UUID, episode_ids: Iterable[int], now: datetime, traversed: Iterable[int] = ()
) -> int:
    """Write uses now, in the caller's transaction when there is one."""
    batch: dict[tuple[uuid.UUID, int], _Use] = {}
    _merge(batch, tenant_id, episode_ids, traversed, now)
    return write_usage(batch)


def _merge(
    into: dict[tuple[uuid.UUID, int], _Use],
    tenant_id: uuid.UUID,
    episode_ids: Iterable[int],
    traversed: Iterable[int],
    now: datetime,
) -> None:
    for episode_id in episode_ids:
        use = into.setdefault((tenant_id, int(episode_id)), _Use())
        use.accesses += 1
        use.at = now
    for episode_id in traversed:
        use = into.setdefault((tenant_id, int(episode_id)), _Use())
        use.traversals += 1
        use.at = now


recorder = UsageRecorder()
atexit.register(recorder.stop)
