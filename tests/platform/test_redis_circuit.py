"""A Redis outage costs each request milliseconds, not a socket timeout: the clients' circuit opens
after a few failures in a row, fails calls at once while open, and lets one call through now and
then to find the server back (memory_platform.redis_client; docs/decisions/0037)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings

from memory_platform.redis_client import Circuit, CircuitOpen, circuit_for, get_redis
from tests.conftest import Caller

from ..retrieval.test_search import turns


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_circuit_opens_after_failures_in_a_row_and_probes_again():
    clock = Clock()
    circuit = Circuit(failures=3, open_seconds=2.0, clock=clock)
    circuit.failed()
    circuit.failed()
    circuit.before()  # two failures: still closed
    circuit.succeeded()
    circuit.failed()
    circuit.failed()
    circuit.before()  # a success in between starts the count again
    circuit.failed()
    assert circuit.is_open
    with pytest.raises(CircuitOpen):
        circuit.before()
    clock.now += 2.0
    circuit.before()  # the probe
    with pytest.raises(CircuitOpen):
        circuit.before()  # others wait for the probe
    circuit.failed()  # the probe failed: open for another period
    clock.now += 1.9
    with pytest.raises(CircuitOpen):
        circuit.before()
    clock.now += 0.2
    circuit.before()
    circuit.succeeded()
    assert not circuit.is_open
    circuit.before()


def test_an_error_reply_is_an_answer_not_a_failure(db):
    client = get_redis(quick=True)
    circuit = circuit_for(settings.REDIS_URL)
    for _ in range(5):
        with pytest.raises(redis.ResponseError):
            client.execute_command("FT.SEARCH", "no-such-index", "*")
    assert not circuit.is_open and client.ping()


@pytest.fixture
def searcher(db):
    caller = Caller("circuit", embedder="tests.hashing_embedder.HashingEmbedder")
    turns(caller, "trip", ["I booked a flight to Lisbon", "Which hotel?", "Near the river in Alfama"])
    return caller


def timed_search(caller, query="hotel in Lisbon"):
    started = time.perf_counter()
    response = caller.post("/api/v1/search", {"query": query})
    return time.perf_counter() - started, response


@pytest.mark.django_db(transaction=True)
def test_with_redis_stopped_searches_answer_within_a_second_degraded(searcher):
    server = settings.EMBEDDED_REDIS
    server.stop()
    try:
        answers = [timed_search(searcher) for _ in range(6)]
        assert circuit_for(settings.REDIS_URL).is_open
    finally:
        server.start()
    print(f"\nRedis stopped: the searches took {[round(t, 3) for t, _ in answers]} s")
    for took, response in answers:
        assert response.status_code == 200
        body = response.json()
        assert body["degraded"] is True and body["results"], body
        assert took < 1.0, [round(t, 3) for t, _ in answers]
    # Started again: the circuit is closed and the hot tier answers.
    took, response = timed_search(searcher)
    assert response.json()["degraded"] is False


@pytest.mark.django_db(transaction=True)
def test_a_frozen_redis_costs_a_few_requests_a_timeout_then_none(searcher):
    """A Redis that accepts connections and never answers (a stuck server, a paused VM): the
    first requests wait for the quick socket timeout, then the circuit opens and the rest answer
    from Postgres at once; when the server answers again, a probe closes the circuit."""
    pid = settings.EMBEDDED_REDIS.status().pid
    assert timed_search(searcher)[1].json()["degraded"] is False  # connections are open
    os.kill(pid, signal.SIGSTOP)
    try:
        answers = [timed_search(searcher) for _ in range(8)]
    finally:
        os.kill(pid, signal.SIGCONT)
    took = [round(t, 2) for t, _ in answers]
    print(f"\nfrozen Redis: the searches took {took} s")
    assert all(r.status_code == 200 and r.json()["degraded"] for _, r in answers)
    # At most three calls wait out the quick timeout (1 s) before the circuit opens.
    assert sum(took) < 4.5, took
    assert max(took[3:]) < 0.5, took
    # Back: within the circuit's open period a probe goes through and closes it.
    time.sleep(2.1)
    answers = [timed_search(searcher) for _ in range(2)]
    assert answers[-1][1].json()["degraded"] is False, [a[1].json()["degraded_reason"] for a in answers]


def searched_undegraded_within(searcher, seconds: float) -> float:
    """How long until a search answers from the hot tier again (searching every 0.1 s); fails
    past ``seconds``."""
    started = time.monotonic()
    while True:
        if timed_search(searcher)[1].json()["degraded"] is False:
            return time.monotonic() - started
        assert time.monotonic() - started < seconds, f"still degraded after {seconds} s"
        time.sleep(0.1)


@pytest.mark.django_db(transaction=True)
def test_a_probe_that_must_connect_again_closes_the_circuit(searcher):
    """Every pooled connection gone (Redis restarted, or each timed out while it was paused): the
    probe connects, and its handshake (AUTH, HELLO, CLIENT SETINFO) is part of it, not a second
    call the open circuit refuses."""
    circuit = circuit_for(settings.REDIS_URL)
    assert timed_search(searcher)[1].json()["degraded"] is False
    for _ in range(circuit.failures):
        circuit.failed()
    for quick in (True, False):
        get_redis(quick=quick).connection_pool.disconnect()
    assert circuit.is_open and timed_search(searcher)[1].json()["degraded"] is True
    time.sleep(circuit.open_seconds)
    took = searched_undegraded_within(searcher, 1.0)
    assert not circuit.is_open
    print(f"\nthe probe connected again and closed the circuit; undegraded {took:.2f} s after its period")


@pytest.mark.django_db(transaction=True)
def test_paused_until_its_connections_time_out_then_resumed_it_is_used_again_within_seconds(searcher):
    pid = settings.EMBEDDED_REDIS.status().pid
    os.kill(pid, signal.SIGSTOP)
    try:
        # Each of the first searches waits out the quick timeout, and its connection is dropped.
        answers = [timed_search(searcher)[1].json()["degraded"] for _ in range(5)]
        assert all(answers) and circuit_for(settings.REDIS_URL).is_open
    finally:
        os.kill(pid, signal.SIGCONT)
    took = searched_undegraded_within(searcher, 5.0)
    assert searcher.client.get("/readyz").status_code == 200
    print(f"\npaused, then resumed: undegraded {took:.2f} s after the resume")


@pytest.mark.django_db(transaction=True)
def test_killed_and_started_again_by_another_process_it_is_used_again_within_seconds(searcher):
    """``kill -9``, then ``manage.py services start`` (another process: this one's circuits are
    not reset for it, as a web worker's are not when an operator or the supervisor restarts Redis)."""
    from tests.conftest import manage_py_environment

    server = settings.EMBEDDED_REDIS
    os.kill(server.status().pid, signal.SIGKILL)
    try:
        answers = [timed_search(searcher) for _ in range(4)]
        assert all(r.json()["degraded"] for _, r in answers) and circuit_for(settings.REDIS_URL).is_open
        assert max(t for t, _ in answers) < 1.0
        environ = manage_py_environment()
        del environ["REDIS_URL"]  # the embedded one, in this suite's data directory
        started = subprocess.run(
            [sys.executable, "manage.py", "services", "start"],
            cwd=Path(__file__).resolve().parents[2],
            env=environ,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert started.returncode == 0, started.stderr
        took = searched_undegraded_within(searcher, 5.0)
    finally:
        if not server.status().running:
            server.start()
    assert searcher.client.get("/readyz").status_code == 200
    print(f"\nkilled, started by another process: undegraded {took:.2f} s after the start")
