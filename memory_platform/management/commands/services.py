import signal
import threading
from datetime import UTC, datetime

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from memory_platform.embedded import PortTakenError, supervisor
from memory_platform.embedded.redis_cluster import EmbeddedRedisCluster
from memory_platform.signals import redis_restarted


def local_cluster(masters: int | None = None, replicas: int | None = None) -> EmbeddedRedisCluster:
    """The local Redis Cluster under ``MEMORY_VAR_DIR`` (its layout as started, unless given)."""
    cluster = EmbeddedRedisCluster(settings.VAR_DIR, masters=1, maxmemory=settings.REDIS_MAXMEMORY)
    known_masters, known_replicas = cluster.layout() if cluster.ports() else (3, 0)
    cluster.masters = masters or known_masters
    cluster.replicas = known_replicas if replicas is None else replicas
    return cluster


class Command(BaseCommand):
    help = (
        "Start, stop or show the embedded Postgres and Redis (used when DATABASE_URL / REDIS_URL are "
        "unset), and a local Redis Cluster for tests and trials (--redis-cluster N). `supervise` "
        "watches the embedded Redis until stopped and starts it again whenever it dies (make run "
        "runs it), then has what it may have lost re-indexed."
    )

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("action", choices=["start", "stop", "status", "supervise"])
        parser.add_argument(
            "--redis-cluster",
            type=int,
            metavar="N",
            help="start: also a local Redis Cluster of N masters under MEMORY_VAR_DIR/redis-cluster "
            "(the platform uses it with REDIS_URL=$(cat MEMORY_VAR_DIR/redis-cluster/url))",
        )
        parser.add_argument(
            "--redis-replicas",
            type=int,
            metavar="R",
            help="with --redis-cluster: R replicas of each master (a replica takes over a failed master)",
        )

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        pg, rd = settings.EMBEDDED_POSTGRES, settings.EMBEDDED_REDIS
        cluster = local_cluster(opts["redis_cluster"], opts["redis_replicas"])
        action = opts["action"]
        if opts["redis_cluster"] is not None and (action != "start" or opts["redis_cluster"] < 1):
            raise CommandError(
                "--redis-cluster N (N at least 1) goes with start; stop and status know the cluster"
            )
        if opts["redis_replicas"] is not None and (
            opts["redis_cluster"] is None or opts["redis_replicas"] < 0
        ):
            raise CommandError("--redis-replicas R (R at least 0) goes with --redis-cluster N")
        if action == "supervise":
            self._supervise(rd)
            return
        if action == "start":
            try:
                if pg is not None:
                    pg.start()
                if rd is not None:
                    rd.start()
                if opts["redis_cluster"]:
                    cluster.start()
            except (PortTakenError, RuntimeError) as exc:
                raise CommandError(str(exc)) from exc
        elif action == "stop":
            # Redis first: nothing in Postgres depends on it, and its AOF is fsynced by SHUTDOWN.
            if cluster.ports():
                self.stdout.write(f"redis-cluster {'stopped' if cluster.stop() else 'was not running'}")
            if rd is not None:
                self.stdout.write(f"redis    {'stopped' if rd.stop() else 'was not running'}")
            if pg is not None:
                self.stdout.write(f"postgres {'stopped' if pg.stop() else 'was not running'}")
            return
        self._status(pg, rd, cluster)

    def _supervise(self, rd):  # type: ignore[no-untyped-def]
        if rd is None:
            self.stdout.write(f"redis    external ({settings.REDIS_URL}): nothing to supervise")
            return
        stop = threading.Event()
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, lambda *_: stop.set())

        def restarted(since: float) -> None:
            # A connection idle since the last restart may have been closed by Postgres meanwhile.
            close_old_connections()
            redis_restarted.send(sender=self.__class__, since=datetime.fromtimestamp(since, UTC))

        def log(line: str) -> None:
            self.stdout.write(f"[supervise] {line}")
            self.stdout.flush()

        log(f"watching the embedded Redis (port {rd.port()})")
        supervisor.watch(rd, log=log, on_restart=restarted, stop=stop)

    def _status(self, pg, rd, cluster):  # type: ignore[no-untyped-def]
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
        if cluster.ports():
            c = cluster.status()
            self.stdout.write(
                f"redis-cluster {'running' if c.running else 'stopped'}  state {c.state}  "
                f"{cluster.masters} masters, {cluster.replicas} replica(s) each  data {c.datadir}  "
                f"(REDIS_URL in {cluster.urlfile})"
            )
            for node in c.nodes:
                where = f"pid {node.pid}" if node.running else "not running"
                self.stdout.write(f"  node 127.0.0.1:{node.port}  {node.role}  {where}")
