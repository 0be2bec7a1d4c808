"""A local Redis Cluster for tests and trials: N masters of the embedded redis-server (and R
replicas of each), each with RediSearch as the single server loads it, on loopback
(``manage.py services start --redis-cluster N [--redis-replicas R]``).

The slots are split evenly over the masters (``CLUSTER ADDSLOTSRANGE``) and the masters meet
(``CLUSTER MEET``) through redis-py: the wheel's ``redis-cli`` needs a libssl these machines lack.
Each master keeps its data, its ``nodes.conf`` and its log in ``<var>/redis-cluster/<n>/``, so a
restart finds the same cluster. The platform uses it with ``REDIS_URL`` set to the URL in
``<var>/redis-cluster/url`` (mode 600: it holds the password)
(docs/decisions/0052-hot-tier-on-redis-cluster.md).
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from .redis import PortTakenError, _port_free, _write_private, collect_index_garbage, free_port, server_args

logger = logging.getLogger(__name__)

SLOTS = 16384


@dataclass(frozen=True)
class NodeStatus:
    port: int
    pid: int | None
    #: "slots 0-5460" for a master as it was made, "replica of 127.0.0.1:<port>" for a replica
    #: (a failover may have swapped them since: CLUSTER NODES says what is now).
    role: str

    @property
    def running(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True)
class ClusterStatus:
    nodes: list[NodeStatus]
    state: str  # CLUSTER INFO's cluster_state ("ok"), or why it is not known
    datadir: str

    @property
    def running(self) -> bool:
        return bool(self.nodes) and all(node.running for node in self.nodes)


def slot_ranges(masters: int) -> list[tuple[int, int]]:
    """The slots each master is given: an even split, first to last."""
    return [(SLOTS * i // masters, SLOTS * (i + 1) // masters - 1) for i in range(masters)]


class EmbeddedRedisCluster:
    """``masters`` redis-servers in cluster mode under ``<var>/redis-cluster``, loopback only,
    password protected (one password, in a mode-600 file, never on a command line), AOF on,
    never evicting, as the single embedded server."""

    def __init__(
        self,
        var_dir: Path,
        *,
        masters: int,
        maxmemory: str,
        replicas: int = 0,
        first_port: int | None = None,
        name: str = "redis-cluster",
    ):
        if masters < 1 or replicas < 0:
            raise ValueError("a cluster has at least one master, and no fewer than 0 replicas of each")
        self.datadir = Path(var_dir).resolve() / name
        self.masters = masters
        #: Replicas of each master (node ``masters + i`` replicates master ``i % masters``).
        self.replicas = replicas
        self.maxmemory = maxmemory
        #: Ports tried first (first_port, first_port + 1, ...); None: any free ports.
        self.first_port = first_port

    # --- where things are --------------------------------------------------------------------------
    def _node_dir(self, i: int) -> Path:
        return self.datadir / str(i)

    @property
    def portsfile(self) -> Path:
        return self.datadir / "ports"

    @property
    def urlfile(self) -> Path:
        return self.datadir / "url"

    def ports(self) -> list[int]:
        """The client port of each node (the masters first), as the last start recorded them."""
        return [port for port, _ in self._recorded()]

    def layout(self) -> tuple[int, int]:
        """(masters, replicas of each) as the last start made them, else as configured."""
        path = self.datadir / "layout"
        if not path.exists():
            return self.masters, self.replicas
        masters, replicas = path.read_text().split()
        return int(masters), int(replicas)

    @staticmethod
    def _master_of(i: int, masters: int) -> int | None:
        return None if i < masters else (i - masters) % masters

    def _recorded(self) -> list[tuple[int, int]]:
        """(client port, cluster bus port) of each master."""
        if not self.portsfile.exists():
            return []
        lines = [line.split() for line in self.portsfile.read_text().split("\n") if line.strip()]
        return [(int(port), int(bus)) for port, bus in lines]

    def password(self) -> str:
        path = self.datadir / "password"
        if not path.exists():
            self.datadir.mkdir(parents=True, exist_ok=True)
            self.datadir.chmod(0o700)
            _write_private(path, secrets.token_urlsafe(32))
        return path.read_text().strip()

    def url(self) -> str:
        nodes = ",".join(f"127.0.0.1:{port}" for port in self.ports()[: self.layout()[0]])
        return f"redis+cluster://:{self.password()}@{nodes}"

    def node_url(self, port: int) -> str:
        return f"redis://:{self.password()}@127.0.0.1:{port}/0"

    def _client(self, port: int, timeout: float = 5.0) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=port, password=self.password(), socket_timeout=timeout)

    def _pid(self, i: int) -> int | None:
        try:
            pid = int((self._node_dir(i) / "redis.pid").read_text().strip())
            proc = psutil.Process(pid)
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and "redis" in proc.name():
                return pid
        except (FileNotFoundError, ValueError, psutil.Error):
            pass
        return None

    # --- life --------------------------------------------------------------------------------------
    def pid(self, port: int) -> int | None:
        """The process of the node on ``port`` (None when it is not running)."""
        return self._pid(self.ports().index(port))

    def status(self) -> ClusterStatus:
        ports = self.ports()
        masters, _ = self.layout()
        ranges = slot_ranges(masters)
        nodes = []
        for i, port in enumerate(ports):
            master = self._master_of(i, masters)
            role = (
                f"slots {ranges[i][0]}-{ranges[i][1]}"
                if master is None
                else f"replica of 127.0.0.1:{ports[master]}"
            )
            nodes.append(NodeStatus(port=port, pid=self._pid(i), role=role))
        state = "stopped"
        if nodes and all(node.running for node in nodes):
            try:
                client = self._client(ports[0])
                state = client.cluster("info").get("cluster_state", "unknown")
                client.close()
            except Exception as exc:  # a status line, never a crash
                state = f"unknown ({type(exc).__name__})"
        return ClusterStatus(nodes=nodes, state=str(state), datadir=str(self.datadir))

    def start(self, timeout: float = 30.0) -> ClusterStatus:
        """Start the nodes not running (the ports of an earlier start if there was one), make the
        cluster if its slots are not assigned yet, and wait until it answers ``ok``."""
        known = self.ports()
        if known and self.layout() != (self.masters, self.replicas):
            masters, replicas = self.layout()
            raise RuntimeError(
                f"the cluster in {self.datadir} has {masters} masters with {replicas} replica(s) each, "
                f"not {self.masters} with {self.replicas}: stop it and remove that directory to make another"
            )
        self.datadir.mkdir(parents=True, exist_ok=True)
        self.datadir.chmod(0o700)
        (self.datadir / "layout").write_text(f"{self.masters} {self.replicas}\n")
        recorded = self._recorded() if known else self._choose_ports()
        self.portsfile.write_text("".join(f"{port} {bus}\n" for port, bus in recorded))
        _write_private(self.urlfile, self.url() + "\n")
        for i, (port, bus) in enumerate(recorded):
            if self._pid(i) is None:
                self._start_node(i, port, bus)
        ports = [port for port, _ in recorded]
        for port in ports:
            self._wait_ready(port, timeout)
        self._form(recorded, timeout)
        for port in ports:
            collect_index_garbage(self.node_url(port))
        # This process's clients may have given up on the servers that ran before (their circuits).
        from memory_platform import redis_client

        redis_client.reset()
        return self.status()

    def _choose_ports(self) -> list[tuple[int, int]]:
        """A client port and a cluster bus port for each master: from ``first_port`` (the bus
        port 10000 above, as Redis has it by default), else any free ones."""
        nodes = self.masters * (1 + self.replicas)
        if self.first_port is None:
            return [(free_port(), free_port()) for _ in range(nodes)]
        chosen = [(self.first_port + i, self.first_port + i + 10000) for i in range(nodes)]
        for port, bus in chosen:
            if not (_port_free(port) and _port_free(bus)):
                raise PortTakenError(f"port {port} or {bus} on 127.0.0.1 is taken; choose other ports")
        return chosen

    def _start_node(self, i: int, port: int, bus: int) -> None:
        node = self._node_dir(i)
        node.mkdir(parents=True, exist_ok=True)
        node.chmod(0o700)
        conf = node / "redis.conf"
        password = self.password()
        _write_private(
            conf,
            f"requirepass {password}\nmasterauth {password}\ncluster-enabled yes\n"
            f"cluster-config-file nodes.conf\ncluster-node-timeout 5000\ncluster-port {bus}\n"
            # A master lost: the others go on serving their slots (by default every master answers
            # CLUSTERDOWN until a replica takes the lost one's slots), so only its tenants wait.
            "cluster-require-full-coverage no\n",
        )
        pidfile = node / "redis.pid"
        pidfile.unlink(missing_ok=True)
        args = server_args(conf, port=port, datadir=node, pidfile=pidfile, maxmemory=self.maxmemory)
        result = subprocess.run(args, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(
                f"redis-server (cluster node {i}) failed to start: {result.stderr or result.stdout}"
            )

    def _wait_ready(self, port: int, timeout: float) -> None:
        import redis

        deadline = time.monotonic() + timeout
        client = self._client(port, 1)
        last: Exception | None = None
        try:
            while time.monotonic() < deadline:
                try:
                    if client.ping() and not client.info("persistence").get("loading"):
                        return
                except redis.RedisError as exc:
                    last = exc
                time.sleep(0.05)
        finally:
            client.close()
        raise RuntimeError(f"cluster node on port {port} did not become ready: {last}")

    def _form(self, recorded: list[tuple[int, int]], timeout: float) -> None:
        """Give each master its share of the slots, make the nodes meet and each replica follow
        its master, unless they already have (a restart reads its nodes.conf); then wait for every
        node to say ``ok``."""
        ports = [port for port, _ in recorded]
        clients = [self._client(port) for port in ports]
        deadline = time.monotonic() + timeout
        try:
            if not int(clients[0].cluster("info").get("cluster_slots_assigned", 0)):
                for client, (lo, hi) in zip(clients, slot_ranges(self.masters), strict=False):
                    client.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
                for client in clients[1:]:
                    client.execute_command("CLUSTER", "MEET", "127.0.0.1", *recorded[0])
                ids = [client.execute_command("CLUSTER", "MYID") for client in clients]
                for i, client in enumerate(clients):
                    master = self._master_of(i, self.masters)
                    if master is not None:
                        self._replicate(client, ids[master], deadline)
            while time.monotonic() < deadline:
                infos = [client.cluster("info") for client in clients]
                formed = all(
                    info.get("cluster_state") == "ok"
                    and int(info.get("cluster_known_nodes", 0)) == len(ports)
                    for info in infos
                )
                # Every node must also know the slot map, and each replica be in sync.
                if (
                    formed
                    and all(len(client.cluster("slots")) == self.masters for client in clients)
                    and all(
                        client.info("replication").get("master_link_status") == "up"
                        for i, client in enumerate(clients)
                        if self._master_of(i, self.masters) is not None
                    )
                ):
                    return
                time.sleep(0.05)
            raise RuntimeError(f"the cluster on ports {ports} did not become ok within {timeout:.0f} s")
        finally:
            for client in clients:
                client.close()

    def _replicate(self, client: Any, master_id: bytes, deadline: float) -> None:
        """Make ``client``'s node a replica of ``master_id`` (once gossip has told it of it)."""
        import redis

        while True:
            try:
                client.execute_command("CLUSTER", "REPLICATE", master_id)
                return
            except redis.ResponseError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, timeout: float = 30.0) -> bool:
        """SHUTDOWN each master (its AOF fsynced first). Returns whether any was running."""
        import redis

        stopped = False
        for i, port in enumerate(self.ports()):
            pid = self._pid(i)
            if pid is None:
                continue
            stopped = True
            try:
                self._client(port).shutdown()
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
        return stopped
