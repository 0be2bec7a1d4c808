"""A Redis outage costs each request milliseconds, not a socket timeout: the clients' circuit opens
after a few failures in a row, fails calls at once while open, and lets one call through now and
then to find the server back (memory_platform.redis_client; docs/decisions/0037)."""

from __future__ import annotations

import os
import signal
import time

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
