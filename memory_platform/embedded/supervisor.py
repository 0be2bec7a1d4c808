"""Keep the embedded Redis running: ``make run`` watches it and starts it again when it dies.

A server that died (killed, crashed, out of memory) leaves its pid file behind naming a process
that is gone; one stopped on purpose (``make stop``, ``manage.py services stop``) takes its pid
file with it, and is left stopped. Started again, the server loads its append-only file: every
write fsynced before the crash is back. The writes of its last second or two may not be
(``appendfsync everysec``); ``on_restart`` is told since when, to have them written again.

Pure Python with no Django import, as the rest of this package.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .redis import EmbeddedRedis

#: The writes a crash may take with it: ``appendfsync everysec`` fsyncs about every second, and
#: Redis lets a write wait up to two more while the disk is slow. A restart asks for everything
#: written this long before the server was last seen alive.
AOF_LOSS_SECONDS = 5.0
#: A process keeps failing its calls for up to two seconds after Redis is back (its circuit waits
#: that long between tries): the writes it takes meanwhile are stored and marked, and are asked
#: for once more this long after the restart, rather than at the repair's next minute.
AGAIN_AFTER_SECONDS = 10.0


def watch(
    server: EmbeddedRedis,
    *,
    log: Callable[[str], None],
    on_restart: Callable[[float], None],
    every: float = 1.0,
    stop: threading.Event | None = None,
    clock: Callable[[], float] = time.time,
) -> None:
    """Look at ``server`` every ``every`` seconds until ``stop`` is set; when it died, start it
    again, then call ``on_restart(since)``: since when (epoch seconds) writes it acknowledged may
    be lost; and once more ``AGAIN_AFTER_SECONDS`` later. A start that fails is logged and tried
    again at the next look."""
    stop = stop or threading.Event()
    seen_alive = clock()
    again: list[tuple[float, float]] = []  # (when, since)
    while not stop.is_set():
        for due in [d for d in again if d[0] <= time.monotonic()]:
            again.remove(due)
            _ask(on_restart, due[1], log)
        if server.died():
            log(f"the embedded Redis (port {server.port()}) died; starting it again")
            started = time.monotonic()
            try:
                status = server.start()
            except Exception as exc:  # noqa: BLE001 - said, and tried again at the next look
                log(f"the embedded Redis did not start again: {exc}")
            else:
                log(
                    f"the embedded Redis is back (pid {status.pid}) in {time.monotonic() - started:.1f} s; "
                    "re-indexing what it may have lost"
                )
                since = seen_alive - AOF_LOSS_SECONDS
                _ask(on_restart, since, log)
                again.append((time.monotonic() + AGAIN_AFTER_SECONDS, since))
                seen_alive = clock()
        else:  # alive, or stopped on purpose (no write is acknowledged then)
            seen_alive = clock()
        stop.wait(every)


def _ask(on_restart: Callable[[float], None], since: float, log: Callable[[str], None]) -> None:
    try:
        on_restart(since)
    except Exception as exc:  # noqa: BLE001 - the repair's schedule finds the marks later
        log(f"could not ask for the re-indexing: {exc}")
