"""Redis paused, or killed, under a running platform: a web server (gunicorn, as `make run` serves),
a worker (`manage.py qcluster`) and the supervisor `make run` starts (`manage.py services
supervise`), real processes on this suite's servers. Searches of two tenants are undegraded again
within seconds of Redis answering, in every process; a killed Redis is started again by the
supervisor, and every turn the API acknowledged, before, during and after, is in the hot index
within a minute (memory_platform/embedded/supervisor.py, docs/decisions/0066).

Run with ``-s`` to see the timings."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from django.conf import settings

from episodes.models import Layer, State, Turn
from episodes.stores import keys
from memory_platform import redis_client
from memory_platform.embedded.redis import free_port
from tests.conftest import Caller, manage_py_environment

from .test_two_nodes import START_WITHIN, Process, _spawn, _stop, _wait, _web_ready, _worker_ready

HASHING = "tests.hashing_embedder.HashingEmbedder"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def served(django_db_setup, tmp_path_factory) -> Iterator[tuple[Process, Process, Process]]:
    logs = tmp_path_factory.mktemp("supervised")
    environ = manage_py_environment(
        MEMORY_EMBEDDER=HASHING,
        MEMORY_WORKERS="1",
        MEMORY_RATE_LIMIT="100000/s",
        MEMORY_TENANT_RATE_LIMIT="100000/s",
        PYTHONUNBUFFERED="1",
    )
    embedded = {k: v for k, v in environ.items() if k != "REDIS_URL"}  # the suite's embedded Redis
    port = free_port()
    gunicorn = [
        *(sys.executable, "-m", "gunicorn", "memory_platform.wsgi:application"),
        *("--config", "python:memory_platform.gunicorn_conf", "--bind", f"127.0.0.1:{port}"),
        *("--workers", "2", "--threads", "4", "--worker-class", "gthread", "--timeout", "120"),
        "--preload",
    ]
    processes = [
        _spawn("web", gunicorn, environ, logs, port),
        _spawn("worker", [sys.executable, "manage.py", "qcluster"], environ, logs),
        _spawn("supervisor", [sys.executable, "manage.py", "services", "supervise"], embedded, logs),
    ]
    web, worker, supervisor = processes
    try:
        _wait(lambda: _web_ready(web), START_WITHIN, "the web server serving", poll=0.3)
        _wait(lambda: _worker_ready(worker), START_WITHIN, "the worker polling", poll=0.3)
        _wait(lambda: "watching the embedded Redis" in supervisor.output(), START_WITHIN, "the supervisor")
        yield web, worker, supervisor
    finally:
        _stop(processes)
        if not settings.EMBEDDED_REDIS.status().running:
            settings.EMBEDDED_REDIS.start()
        redis_client.reset()


def _post(web: Process, caller: Caller, path: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"{web.url}/api/v1{path}", json=body, headers={"Authorization": f"Bearer {caller.secret}"}, timeout=30
    )


def _undegraded_within(web: Process, callers: list[Caller], seconds: float, since: float) -> float:
    """Seconds from ``since`` until every web worker is back on Redis: from then on ``/readyz``
    answers 200 and each tenant's search answers from the hot tier, ten times in a row (the
    requests go to whichever worker takes them, each of which finds Redis back on its own)."""
    streak, back = 0, 0.0
    while streak < 10:
        asked = time.monotonic()
        answers = [_post(web, c, "/search", {"query": "the orchard and its pears"}) for c in callers]
        ready = httpx.get(f"{web.url}/readyz", timeout=10)
        if ready.status_code == 200 and all(
            a.status_code == 200 and a.json()["degraded"] is False for a in answers
        ):
            streak, back = streak + 1, back if streak else asked
        else:
            streak = 0
        assert (back if streak else time.monotonic()) - since < seconds, (
            ready.text,
            [a.json().get("degraded_reason") for a in answers],
        )
        time.sleep(0.05)
    return back - since


def _tenants() -> list[Caller]:
    callers = [Caller(name, embedder=HASHING) for name in ("supervised-a", "supervised-b")]
    for caller in callers:
        turns = [{"role": "user", "text": f"note {i} about the orchard and its pears"} for i in range(3)]
        assert caller.post("/api/v1/turns", {"session_id": "s", "turns": turns}).status_code == 201
    return callers


def test_paused_then_resumed_every_process_searches_the_hot_tier_again_within_seconds(served):
    web, _, supervisor = served
    callers = _tenants()
    _undegraded_within(web, callers, 5.0, time.monotonic())
    pid = settings.EMBEDDED_REDIS.status().pid
    os.kill(pid, signal.SIGSTOP)
    try:
        paused = time.monotonic()
        degraded = 0
        while time.monotonic() - paused < 6.0:  # searches wait out their timeouts, then the circuits open
            for caller in callers:
                degraded += _post(web, caller, "/search", {"query": "pears"}).json()["degraded"]
        assert degraded
    finally:
        os.kill(pid, signal.SIGCONT)
    took = _undegraded_within(web, callers, 5.0, time.monotonic())
    assert "died" not in supervisor.output()  # a paused server is alive: left as it is
    print(
        f"\nRedis paused 6 s: {degraded} searches degraded meanwhile; undegraded {took:.2f} s after the resume"
    )


def test_killed_it_is_started_again_and_every_acknowledged_turn_is_indexed_within_a_minute(served):
    web, worker, supervisor = served
    callers = _tenants()
    acknowledged: list[str] = []
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            caller = callers[i % 2]
            turn = {"role": "user", "text": f"entry {i}: the orchard's pears, quinces and plums"}
            answer = _post(web, caller, "/turns", {"session_id": f"w{i // 20}", "turns": [turn]})
            assert answer.status_code == 201, answer.text
            acknowledged.extend(t["id"] for t in answer.json()["turns"])
            i += 1
            time.sleep(0.02)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(2.0)
        killed = time.monotonic()
        os.kill(settings.EMBEDDED_REDIS.status().pid, signal.SIGKILL)
        _wait(lambda: "is back" in supervisor.output(), 30.0, "the supervisor starting Redis again")
        back = time.monotonic() - killed
        took = _undegraded_within(web, callers, 30.0, killed)
        time.sleep(2.0)  # writes after the return too
    finally:
        stop.set()
        writer.join()
    written = time.monotonic()

    def missing() -> list[str]:
        rows = list(
            Turn.objects.across_tenants("test: the acknowledged turns")
            .filter(public_id__in=acknowledged, episode__layer=Layer.HOT)
            .exclude(episode__state=State.FORGOTTEN)
            .values_list("public_id", "tenant_id", "pk")
        )
        assert len(rows) == len(acknowledged)
        pipe = redis_client.get_redis().pipeline(transaction=False)
        for _, tenant_id, pk in rows:
            pipe.exists(keys.turn_key(tenant_id.hex, pk))
        return [public_id for (public_id, _, _), found in zip(rows, pipe.execute(), strict=True) if not found]

    indexed = _wait(lambda: not missing(), 60.0, "every acknowledged turn in the hot index", poll=1.0)
    print(
        f"\nRedis killed: started again by the supervisor {back:.1f} s after, searches undegraded "
        f"{took:.1f} s after; {len(acknowledged)} turns acknowledged, all in the hot index "
        f"{indexed:.1f} s after the last write"
    )
    assert back < 30.0 and took < 30.0 and written
    assert "re-indexing what it may have lost" in supervisor.output()
    worker.check_alive()
