"""gunicorn's hooks for the web workers of ``make run`` and the one setting that is not on
``bin/run``'s command line (it passes ``--config python:memory_platform.gunicorn_conf``).

Each worker loads what the first write and search need (``memory_platform.warmup``) before it
takes a request, so no caller waits for a model to load. It does so after the fork, in the worker:
the master (``--preload``) must not run torch, whose OpenMP threads do not survive a fork. While
it loads, the worker keeps telling the master it is alive, so a slow load on a busy machine is not
taken for a hung worker. Then it says so in ``MEMORY_WEB_READY_DIR`` (a file named by its pid),
where ``bin/run`` waits for every worker before it says it is serving.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

# gunicorn 25.1 and later listen on a control socket for ``gunicornc``, by default at one path per
# user (~/.gunicorn/gunicorn.ctl): a second platform on the machine (another clone, another
# MEMORY_VAR_DIR) takes it over, and the first to stop deletes it from under the other. Nothing
# here uses it. An older gunicorn ignores the name.
control_socket_disable = True


def post_worker_init(worker: Any) -> None:
    from memory_platform.warmup import warm_up

    done = threading.Event()

    def load() -> None:
        try:
            warm_up(lambda line: worker.log.info("worker %s: %s", worker.pid, line))
        finally:
            done.set()

    threading.Thread(target=load, name="warm-up", daemon=True).start()
    while not done.wait(1.0):
        worker.notify()
    ready = os.environ.get("MEMORY_WEB_READY_DIR")
    if ready:
        Path(ready, str(worker.pid)).touch()
