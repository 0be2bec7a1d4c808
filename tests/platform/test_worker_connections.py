"""A pool thread's database connection (``db.in_worker``) outlives ``close_worker_connections``."""

import functools
from concurrent.futures import ThreadPoolExecutor

import pytest

from memory_platform import db

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_pool_threads_connection_closed_from_another_thread_is_opened_again():
    """A bulk load closes every pool thread's connection when it is done (its own threads'); a pool
    thread that searches next must open a new one, not fail on the closed one."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        assert pool.submit(
            db.in_worker, functools.partial(db.fetch_one, "SELECT 1", tenant=None)
        ).result() == (1,)
        db.close_worker_connections()
        assert pool.submit(
            db.in_worker, functools.partial(db.fetch_one, "SELECT 2", tenant=None)
        ).result() == (2,)
    finally:
        pool.submit(db.in_worker, lambda: None).result()
        pool.shutdown(wait=True)
        db.close_worker_connections()
