"""`manage.py backup`: a consistent dump of the system of record (Postgres), or a restore of one.

Redis holds nothing that Postgres does not: after a restore, `manage.py rebuild_hot` indexes the
hot tier again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone


def _client(program: str) -> str:
    embedded = settings.EMBEDDED_POSTGRES
    if embedded is not None:
        return str(embedded.bin_dir() / program)
    found = shutil.which(program)
    if found is None:
        raise CommandError(
            f"{program} is not on PATH; install the PostgreSQL client of your server's version"
        )
    return found


def _connection_args() -> tuple[list[str], dict[str, str]]:
    db = settings.DATABASES["default"]
    args = ["-h", str(db.get("HOST") or "localhost"), "-U", str(db.get("USER") or "postgres")]
    if db.get("PORT"):
        args += ["-p", str(db["PORT"])]
    env = dict(os.environ)
    if db.get("PASSWORD"):
        env["PGPASSWORD"] = str(db["PASSWORD"])
    return [*args, "-d", str(db["NAME"])], env


class Command(BaseCommand):
    help = (
        "Dump the platform's Postgres database (custom format) to a file, or restore one with --restore. "
        "Redis is rebuilt from Postgres: run `manage.py rebuild_hot` after a restore."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument(
            "--output", help="where to write the dump (default var/backups/memory-<time>.dump)"
        )
        parser.add_argument("--restore", metavar="FILE", help="restore this dump over the current database")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        connection_args, env = _connection_args()
        if opts["restore"]:
            path = Path(opts["restore"])
            if not path.is_file():
                raise CommandError(f"no such dump: {path}")
            command = [
                _client("pg_restore"),
                "--clean",
                "--if-exists",
                "--no-owner",
                *connection_args,
                str(path),
            ]
            self._run(command, env)
            self.stdout.write(f"restored {path}; now run: manage.py rebuild_hot")
            return
        default = settings.VAR_DIR / "backups" / f"memory-{timezone.now():%Y%m%dT%H%M%SZ}.dump"
        path = Path(opts["output"] or default)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not opts["output"]:
            path.parent.chmod(0o700)  # what people said, in one file: only this account reads it
        self._run([_client("pg_dump"), "-Fc", "-f", str(path), *connection_args], env)
        path.chmod(0o600)
        self.stdout.write(f"wrote {path} ({path.stat().st_size:,} bytes)")

    def _run(self, command: list[str], env: dict[str, str]) -> None:
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise CommandError(f"{Path(command[0]).name} failed: {result.stderr.strip()}")
