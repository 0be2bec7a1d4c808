from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from memory_platform.embedded import PortTakenError


class Command(BaseCommand):
    help = (
        "Start, stop or show the embedded Postgres and Redis (used when DATABASE_URL / REDIS_URL are unset)."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("action", choices=["start", "stop", "status"])

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        pg, rd = settings.EMBEDDED_POSTGRES, settings.EMBEDDED_REDIS
        action = opts["action"]
        if action == "start":
            try:
                if pg is not None:
                    pg.start()
                if rd is not None:
                    rd.start()
            except PortTakenError as exc:
                raise CommandError(str(exc)) from exc
        elif action == "stop":
            # Redis first: nothing in Postgres depends on it, and its AOF is fsynced by SHUTDOWN.
            if rd is not None:
                self.stdout.write(f"redis    {'stopped' if rd.stop() else 'was not running'}")
            if pg is not None:
                self.stdout.write(f"postgres {'stopped' if pg.stop() else 'was not running'}")
            return
        self._status(pg, rd)

    def _status(self, pg, rd):  # type: ignore[no-untyped-def]
        if pg is None:
            self.stdout.write("postgres external (DATABASE_URL)")
        else:
            s = pg.status()
            where = f"socket {s.socket_dir}, pid {s.pid}" if s.running else "not running"
            self.stdout.write(f"postgres {'running' if s.running else 'stopped'}  {where}  data {s.datadir}")
        if rd is None:
            self.stdout.write(f"redis    external ({settings.REDIS_URL})")
        else:
            r = rd.status()
            where = f"127.0.0.1:{r.port}, pid {r.pid}" if r.running else "not running"
            self.stdout.write(f"redis    {'running' if r.running else 'stopped'}  {where}  data {r.datadir}")
