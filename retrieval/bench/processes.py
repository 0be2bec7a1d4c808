"""The embedded servers' processes, as the benchmarks read them (their memory in `bench soak`,
their processor time in `bench search`)."""

from __future__ import annotations

from typing import Any

import psutil
from django.conf import settings


def embedded_pid(name: str) -> int | None:
    """The pid of the embedded server ``settings.<name>`` (``EMBEDDED_POSTGRES``, ``EMBEDDED_REDIS``);
    None when that server is not embedded (an external URL) or not running."""
    server: Any = getattr(settings, name)
    return None if server is None else server.status().pid


def tree(pid: int | None) -> list[psutil.Process] | None:
    """The process and every descendant (Postgres serves each connection in a backend of its own);
    None when there is no such process. A descendant may end while the caller reads it."""
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
