"""The benchmark's child processes: a gunicorn serving the platform (``Server``), timed search
requests to it, and the environment every process it starts runs with (this process's settings,
data directory, database and Redis)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from django.conf import settings
from django.db import connection

from memory_platform.embedded.redis import free_port


def wait_or_kill(proc: subprocess.Popen[Any], seconds: float = 15) -> None:
    """Wait for a process asked to end; kill it when it has not within ``seconds``."""
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the benchmark process dies, however it dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _database_url() -> str:
    """This process's database as a URL: the configured one with the database name in use, or
    the embedded server's socket."""
    params = connection.settings_dict
    name = quote(params["NAME"], safe="")
    configured = os.environ.get("DATABASE_URL")
    if configured:
        return urlunsplit(urlsplit(configured)._replace(path=f"/{name}"))
    return f"postgres://{quote(params['USER'], safe='')}@{quote(params['HOST'], safe='')}/{name}"


def child_env() -> dict[str, str]:
    """The environment of a process this benchmark starts: this process's settings, data
    directory, database and Redis (under the tests, the test database)."""
    env = dict(os.environ)
    env.setdefault("SECRET_KEY", settings.SECRET_KEY)
    env.setdefault("DJANGO_SETTINGS_MODULE", "memory_platform.settings")
    env["MEMORY_VAR_DIR"] = str(settings.VAR_DIR)
    env["DATABASE_URL"] = _database_url()
    env["REDIS_URL"] = settings.REDIS_URL
    # One client asks as fast as it is answered: the limits are counted as always, never reached.
    env["MEMORY_RATE_LIMIT"] = env["MEMORY_TENANT_RATE_LIMIT"] = "1000000/s"
    return env


#: The web workers `make run` starts (``WEB_WORKERS`` in ``bin/run``): what a load is served by.
MAKE_RUN_WORKERS = 2


class Server:
    """gunicorn on a free loopback port, with this process's settings and data directory, serving
    the code under ``root`` (this tree's by default; another revision's checkout for ``--against``)
    with ``workers`` processes of 4 threads (one by default, so the model loads once; a load is
    served as `make run` serves, ``MAKE_RUN_WORKERS``)."""

    def __init__(self, root: Path | None = None, workers: int = 1) -> None:
        self.port = free_port()
        env = child_env()
        root = root or Path(settings.BASE_DIR)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "memory_platform.wsgi:application",
                "--bind",
                f"127.0.0.1:{self.port}",
                # As `make run` serves (gthread).
                "--workers",
                str(workers),
                "--threads",
                "4",
                "--worker-class",
                "gthread",
                "--log-level",
                "warning",
            ],
            cwd=root,
            env=env,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError("the benchmark web server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        wait_or_kill(self.proc)


def measure_http(
    port: int, secret: str, queries: list[tuple[str, list[float]]], with_vector: bool
) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    times = [timed_search_request(conn, headers, text, vector, with_vector) for text, vector in queries]
    conn.close()
    return times


def timed_search_request(
    conn: http.client.HTTPConnection,
    headers: dict[str, str],
    text: str,
    vector: list[float],
    with_vector: bool,
) -> float:
    """One ``POST /search`` on ``conn``, timed from the request's first byte to the answer's last, ms."""
    body: dict[str, Any] = {"query": text, "limit": 10}
    if with_vector:
        body["vector"] = vector
    payload = json.dumps(body)
    started = time.perf_counter()
    conn.request("POST", "/api/v1/search", body=payload, headers=headers)
    response = conn.getresponse()
    response.read()
    took = (time.perf_counter() - started) * 1000
    if response.status != 200:
        raise RuntimeError(f"search answered {response.status}")
    return took
