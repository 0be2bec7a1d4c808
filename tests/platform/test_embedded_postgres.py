"""The embedded Postgres after a crash: its own cluster in a temporary directory, killed and started
again as `make run` starts it."""

from __future__ import annotations

import os
import signal
import time

import psycopg
import pytest

from memory_platform.embedded import EmbeddedPostgres


def _dead_rows(pg: EmbeddedPostgres) -> int:
    with psycopg.connect(pg.database_url(), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'notes'").fetchone()
    return int(row[0]) if row else 0


@pytest.fixture
def own_cluster(tmp_path):
    pg = EmbeddedPostgres(tmp_path)
    pg.start()
    yield pg
    pg.stop()


def test_a_killed_cluster_knows_its_dead_rows_again_after_the_start(own_cluster):
    pg = own_cluster
    with psycopg.connect(pg.database_url(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET autovacuum = off")  # the dead rows stay for the test to count
        conn.execute("SELECT pg_reload_conf()")
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
        conn.execute("INSERT INTO notes SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g")
        conn.execute("DELETE FROM notes WHERE id % 10 <> 0")
    assert _dead_rows(pg) == 18000

    os.kill(pg.status().pid, signal.SIGKILL)  # the postmaster: its backends follow it
    deadline = time.monotonic() + 30
    while pg.status().running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pg.status().running
    assert pg.stopped_uncleanly()

    pg.start()
    # Without the recount the restarted server counts no dead row, and autovacuum never visits.
    assert 15000 < _dead_rows(pg) < 21000


def test_a_cluster_stopped_by_stop_is_not_recounted(own_cluster):
    pg = own_cluster
    pg.stop()
    assert not pg.stopped_uncleanly()
