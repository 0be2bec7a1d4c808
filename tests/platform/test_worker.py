"""The worker as `make run` starts it: a real `manage.py qcluster` on the test database. Its queue is
in Postgres (tasks run while Redis is full or down), and it stops promptly on SIGTERM (hardening
finding 10: the worker did not exit within 40 s)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import manage_py_environment

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)


def _wait(condition, timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def test_the_worker_runs_queued_tasks_from_postgres_and_stops_on_sigterm():
    from django_q.models import Success
    from django_q.tasks import async_task

    environ = manage_py_environment(MEMORY_WORKERS="1")
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        async_task("math.floor", 2.5, task_name="worker-check")
        _wait(lambda: Success.objects.filter(name="worker-check").exists(), 60, "the queued task")
        assert Success.objects.get(name="worker-check").result == 2
        worker.send_signal(signal.SIGTERM)
        stopped = _wait(lambda: worker.poll() is not None, 30, "the worker's exit")
        assert stopped < 15
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
