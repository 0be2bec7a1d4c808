"""Real embedded Postgres and Redis for the whole run, in a temporary directory (never ``var/``)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from memory_platform.tenancy.services import api_key_create, tenant_create


def pytest_sessionstart(session: pytest.Session) -> None:
    # A missing or broken server is a failure, never a skip.
    if settings.EMBEDDED_POSTGRES is not None:
        settings.EMBEDDED_POSTGRES.start()
    if settings.EMBEDDED_REDIS is not None:
        settings.EMBEDDED_REDIS.start()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from django.db import connections

    connections.close_all()
    if settings.EMBEDDED_REDIS is not None:
        settings.EMBEDDED_REDIS.stop()
    if settings.EMBEDDED_POSTGRES is not None:
        settings.EMBEDDED_POSTGRES.stop()
    if str(settings.VAR_DIR).startswith("/tmp/mp-test-"):
        shutil.rmtree(settings.VAR_DIR, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _close_worker_connections(django_db_setup, django_db_blocker):
    """Search runs half its Postgres work on worker threads, and usage counts are written by a
    thread, each with its own connection: close them before pytest-django drops the test database."""
    yield
    from memory_platform.db import close_worker_connections
    from retrieval.usage import recorder

    with django_db_blocker.unblock():
        recorder.stop()
    close_worker_connections()


@pytest.fixture(autouse=True)
def _clean_redis():
    from episodes.stores.hot import hot_store
    from memory_platform import counters
    from memory_platform.redis_client import get_redis

    counters.flush()  # an earlier test's counts, written now rather than into this test's Redis
    get_redis().flushdb()
    hot_store().forget_index_state()
    yield


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The search fuzz's counts, when it ran (tests/retrieval/test_search_cannot_stall.py)."""
    stall = sys.modules.get("tests.retrieval.test_search_cannot_stall")
    if stall is not None and stall.FUZZ["queries"]:
        terminalreporter.section("the search fuzz")
        terminalreporter.write_line(stall.fuzz_summary())


def pytest_configure(config: pytest.Config) -> None:
    from tests.tenant_statements import Recorder

    # Every statement on a table distributed by tenant names its tenant (docs/operations/scale-out.md).
    config.pluginmanager.register(Recorder(), "tenant_statements")
    config.addinivalue_line(
        "markers",
        "single_redis: in a module run on both Redis deployments (redis_deployment), a test of what "
        "only the single embedded server does (its restart, its settings); run there only",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that uses ``redis_deployment`` runs on the single server and on the cluster."""
    if "redis_deployment" in metafunc.fixturenames:
        single_only = metafunc.definition.get_closest_marker("single_redis") is not None
        metafunc.parametrize(
            "redis_deployment", ["single"] if single_only else ["single", "cluster"], indirect=True
        )


@pytest.fixture(scope="session")
def redis_cluster():
    """A local 3-master Redis Cluster, started once for the run (when a test asks for it)."""
    from memory_platform.embedded.redis_cluster import EmbeddedRedisCluster

    cluster = EmbeddedRedisCluster(settings.VAR_DIR, masters=3, maxmemory="512mb")
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def redis_deployment(request):
    """The hot tier, counters and rate limits on the single embedded server ("single") or on a
    3-master cluster ("cluster", through ``REDIS_URL=redis+cluster://...``). A module opts in with
    ``pytestmark = pytest.mark.usefixtures("redis_deployment")``; its tests then run on both."""
    if request.param == "single":
        yield "single"
        return
    from episodes.stores import hot
    from memory_platform import counters
    from memory_platform.redis_client import get_redis

    cluster = request.getfixturevalue("redis_cluster")
    counters.flush()  # counts of the single server's tests go there
    single_url, single_store = settings.REDIS_URL, hot._store
    settings.REDIS_URL, hot._store = cluster.url(), None
    get_redis().flushdb()  # every master
    try:
        yield "cluster"
    finally:
        counters.flush()
        settings.REDIS_URL, hot._store = single_url, single_store


@pytest.fixture(autouse=True)
def _public_ids_only():
    """The test's API answers named no episode or turn by its integer key (tests/public_answers.py)."""
    from tests import public_answers

    public_answers.seen.clear()
    yield
    assert not public_answers.seen, f"internal ids in API answers: {public_answers.seen[:5]}"


def manage_py_environment(**extra: str) -> dict[str, str]:
    """The environment of a ``manage.py`` process on this suite's servers and test database."""
    import os
    from urllib.parse import quote

    from django.db import connection

    db = connection.settings_dict
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "DJANGO_"))}
    environ.update(
        DEBUG="1",
        MEMORY_VAR_DIR=str(settings.VAR_DIR),
        DATABASE_URL=f"postgres://{db['USER']}@{quote(db['HOST'], safe='')}:{db['PORT'] or 5432}/{db['NAME']}",
        REDIS_URL=settings.REDIS_URL,
        **extra,
    )
    return environ


def interrupt_manage_py(
    args: list[str], at: Callable[[str], bool], before: Callable[[], object] = lambda: None
) -> tuple[int, str, str]:
    """Run ``manage.py *args`` on this suite's servers and press Ctrl-C (SIGINT) at the first line
    of its output for which ``at`` is true, after ``before`` (a check of what it has done by then);
    returns its exit code, its output (the lines read before the signal included) and its errors.
    Without such a line within the time, it is killed and the output says what was seen."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    proc = subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=Path(__file__).resolve().parents[1],
        env=manage_py_environment(PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell starting a job in the background (`make test &`, CI runners) hands it SIGINT
        # ignored, and Python then installs no KeyboardInterrupt: give the command a terminal's Ctrl-C.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if at(line):
            try:
                before()
            finally:  # a failed check still ends the command (and drops what it made)
                proc.send_signal(signal.SIGINT)
            break
    else:
        proc.kill()
    out, err = proc.communicate(timeout=180)
    return proc.returncode, "".join(seen) + out, err


class Caller:
    """A tenant with a key and an API client that sends it."""

    def __init__(
        self,
        name: str,
        scopes: tuple[str, ...] = ("read", "write"),
        embedder: str | None = None,
        tenant=None,
    ):
        """A new tenant called ``name``, or another key of ``tenant``."""
        self.tenant = tenant or tenant_create(name=name, embedder=embedder)
        from django.utils import timezone

        self.key, self.secret = api_key_create(
            tenant=self.tenant, name=f"{name} key", scopes=scopes, actor="service", now=timezone.now()
        )
        self.client = APIClient()
        self.client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.secret}")

    def post(self, path: str, data=None, **kw):
        return self.client.post(path, data, format="json", **kw)

    def get(self, path: str, data=None, **kw):
        return self.client.get(path, data, **kw)

    def delete(self, path: str, data=None, **kw):
        return self.client.delete(path, data, format="json", **kw)


@pytest.fixture
def caller(db) -> Caller:
    return Caller("acme")


@pytest.fixture
def outsider(db) -> Caller:
    return Caller("outsider")


def pk(public_id: str) -> int:
    """The internal id of the episode the API calls ``public_id`` (services and rows use it)."""
    from episodes.models import Episode

    return Episode.objects.across_tenants("test").values_list("pk", flat=True).get(public_id=public_id)


def turn_pk(public_id: str) -> int:
    from episodes.models import Turn

    return Turn.objects.across_tenants("test").values_list("pk", flat=True).get(public_id=public_id)


def unit_vectors(count: int, seed: int = 0, dim: int = 384):
    """Deterministic random unit vectors for tenants that provide their own embeddings."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(count, dim)).astype("float32")
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture
def provided(db) -> Caller:
    return Caller("provided-co", embedder="provided")


@pytest.fixture
def admin_client(client, db):
    """A logged-in superuser "op" (the admin's actions record it as actor "admin:op")."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_superuser("op", "op@example.com", "pw-12345678")
    client.force_login(user)
    return client
