"""Several nodes on the same Postgres and Redis: two web nodes (gunicorn, as `make run` serves, on
two ports) and two workers (`manage.py qcluster`), real processes on this suite's servers and test
database. What one node counts or decides, the other sees: rate limits and counters, a revoked
key, the tenant's tick lock, the index repair, the schedules (docs/operations.md#several-nodes,
docs/decisions/0054-several-nodes.md).

Run with ``-s`` to see the timings."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.db import transaction
from django.utils import timezone

from memory_platform.embedded.redis import free_port
from tests.conftest import Caller, manage_py_environment

ROOT = Path(__file__).resolve().parents[2]
HASHING = "tests.hashing_embedder.HashingEmbedder"
PER_KEY = 6  # requests a minute each key may make, on both web nodes (MEMORY_RATE_LIMIT)
START_WITHIN = 180.0  # seconds for four processes to start on a loaded 2-core machine
TASKS_WITHIN = 90.0

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Process:
    name: str
    proc: subprocess.Popen
    log: Path
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited ({self.proc.returncode}):\n{self.output()[-3000:]}")


@dataclass
class Nodes:
    web: tuple[Process, Process]
    workers: tuple[Process, Process]


def _wait(condition: Callable[[], object], within: float, what: str, poll: float = 0.1) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within:
        if condition():
            return time.monotonic() - started
        time.sleep(poll)
    raise AssertionError(f"{what} did not happen within {within:.0f} s")


def _spawn(name: str, argv: list[str], environ: dict[str, str], logs: Path, port: int = 0) -> Process:
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=environ, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Process(name, proc, log, port)


def _stop(processes: list[Process]) -> None:
    """SIGTERM to each process group (gunicorn's workers, the worker's pool), SIGKILL past 20 s."""
    for process in processes:
        if process.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.proc.wait(max(0.1, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.proc.pid, signal.SIGKILL)  # what the group still holds
        process.proc.wait()


def _web_ready(node: Process) -> bool:
    node.check_alive()
    try:
        return httpx.get(f"{node.url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _worker_ready(node: Process) -> bool:
    node.check_alive()
    text = node.output()
    return "ready for work" in text and "pushing tasks" in text


@pytest.fixture(scope="module")
def nodes(django_db_setup, tmp_path_factory) -> Iterator[Nodes]:
    """Two web nodes and two workers, each configured only by its environment, as on separate
    machines: the same DATABASE_URL, REDIS_URL and SECRET_KEY (here from the shared data
    directory), nothing else in common."""
    logs = tmp_path_factory.mktemp("nodes")
    environ = manage_py_environment(
        MEMORY_EMBEDDER=HASHING,  # no model to load: the nodes start in seconds
        MEMORY_RATE_LIMIT=f"{PER_KEY}/min",
        MEMORY_TENANT_RATE_LIMIT="1000/s",
        MEMORY_WORKERS="1",
        PYTHONUNBUFFERED="1",
    )
    processes: list[Process] = []
    try:
        for name in ("web-a", "web-b"):
            port = free_port()
            gunicorn = [
                *(sys.executable, "-m", "gunicorn", "memory_platform.wsgi:application"),
                *("--config", "python:memory_platform.gunicorn_conf", "--bind", f"127.0.0.1:{port}"),
                *("--workers", "1", "--threads", "4", "--worker-class", "gthread", "--timeout", "120"),
                "--preload",
            ]
            processes.append(_spawn(name, gunicorn, environ, logs, port))
        for name in ("worker-a", "worker-b"):
            processes.append(_spawn(name, [sys.executable, "manage.py", "qcluster"], environ, logs))
        web, workers = processes[:2], processes[2:]
        started = time.monotonic()
        for node in web:
            _wait(lambda node=node: _web_ready(node), START_WITHIN, f"{node.name} serving", poll=0.3)
        for node in workers:
            _wait(lambda node=node: _worker_ready(node), START_WITHIN, f"{node.name} polling", poll=0.3)
        print(f"\nfour nodes started in {time.monotonic() - started:.1f} s")
        yield Nodes(web=(web[0], web[1]), workers=(workers[0], workers[1]))
    finally:
        _stop(processes)


def _whoami(node: Process, secret: str) -> httpx.Response:
    return httpx.get(f"{node.url}/api/v1/whoami", headers={"Authorization": f"Bearer {secret}"}, timeout=10)


def _enqueue(func: str, args: tuple[object, ...], names: list[str]) -> None:
    """Queue the tasks in one commit, so both workers find them at once."""
    from django_q.tasks import async_task

    with transaction.atomic():
        for name in names:
            async_task(func, *args, task_name=name)


def _finished(names: list[str]) -> list:
    from django_q.models import Task

    _wait(
        lambda: Task.objects.filter(name__in=names).count() == len(names),
        TASKS_WITHIN,
        f"{len(names)} tasks run",
        poll=0.2,
    )
    tasks = list(Task.objects.filter(name__in=names))
    assert all(task.success for task in tasks), [task.result for task in tasks if not task.success]
    return tasks


def _ran_on(nodes: Nodes, names: list[str]) -> dict[str, list[str]]:
    """The tasks each worker says it processed (django-q's log line)."""
    return {
        node.name: [name for name in names if re.search(rf"processing {re.escape(name)}\b", node.output())]
        for node in nodes.workers
    }


def test_rate_limits_and_counters_are_shared_by_the_web_nodes(nodes):
    from memory_platform.tenancy.audit import key_uses

    caller = Caller("shared-limits")
    asked = PER_KEY + 2
    for _ in range(3):
        window = int(time.time() // 60)
        answers = [
            (node.name, _whoami(node, caller.secret))
            for node in itertools.islice(itertools.cycle(nodes.web), asked)
        ]
        if int(time.time() // 60) == window:
            break
        caller = Caller("shared-limits again", tenant=caller.tenant)  # the minute turned: a fresh key
    else:
        raise AssertionError("three minutes turned during three tries")

    codes = [answer.status_code for _, answer in answers]
    # Three requests on each node, then refused by both: one window in Redis, not one per node.
    assert codes == [200] * PER_KEY + [429, 429], codes
    assert {name for name, answer in answers if answer.status_code == 429} == {"web-a", "web-b"}
    assert all(1 <= int(answer.headers["Retry-After"]) <= 60 for _, answer in answers[PER_KEY:])

    # Each node counts what it served into the tenant's counters in Redis: one sum.
    took = _wait(
        lambda: key_uses(caller.tenant).get(caller.key.prefix) == asked, 20, "the key's uses counted"
    )
    print(f"\n{asked} requests alternated: {codes}; both nodes' counts summed {took:.2f} s after the last")


def test_a_key_revoked_through_one_node_is_refused_by_the_other_at_once(nodes):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    from memory_platform.tenancy.models import ApiKey, Tenant

    node_a, node_b = nodes.web
    caller = Caller("revoked-key")
    Tenant.objects.filter(pk=caller.tenant.pk).update(rate_limit="100000/s")  # polled below
    # Hashed as the nodes hash (the suite's own settings use a fast hasher they do not read).
    hasher = PBKDF2PasswordHasher()
    operator = get_user_model().objects.create_superuser("op", "op@example.com")
    operator.password = hasher.encode("pw-12345678", hasher.salt())
    operator.save(update_fields=["password"])

    with httpx.Client(base_url=node_a.url, timeout=10) as console:
        form = console.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert token, form.text[:500]
        login = console.post(
            "/admin/login/",
            data={"username": "op", "password": "pw-12345678", "csrfmiddlewaretoken": token.group(1)},
        )
        assert login.status_code == 302, login.text[:500]
        # The session opened on one node is valid on the other (sessions in Postgres, one SECRET_KEY).
        assert httpx.get(f"{node_b.url}/admin/", cookies=console.cookies, timeout=10).status_code == 200

        for node in (node_a, node_b, node_a, node_b):
            assert _whoami(node, caller.secret).status_code == 200

        revoke = console.post(
            "/admin/tenancy/apikey/",
            data={
                "action": "revoke_keys",
                "_selected_action": caller.key.pk,
                "csrfmiddlewaretoken": console.cookies["csrftoken"],
            },
        )
        revoked_at = time.monotonic()
        assert revoke.status_code == 302, revoke.text[:500]
    assert ApiKey.objects.for_tenant(caller.tenant).get(pk=caller.key.pk).revoked

    answers = []
    while time.monotonic() - revoked_at < 1.0:
        answers.append(_whoami(node_b, caller.secret).status_code)
        if answers[-1] == 401:
            break
    refused_after = time.monotonic() - revoked_at
    assert answers[-1] == 401, f"the other node still answered the revoked key after 1 s: {answers}"
    assert _whoami(node_a, caller.secret).status_code == 401
    print(
        f"\nrevoked through {node_a.name}: {node_b.name} refused it {refused_after * 1000:.1f} ms after the "
        f"revocation's answer, at its request number {len(answers)}"
    )


def test_one_tick_of_a_tenant_at_a_time_across_the_workers_and_no_episode_moves_twice(nodes):
    from episodes.models import Episode, Layer
    from lifecycle.models import JournalEntry, TickRun
    from tests.lifecycle.factories import memory

    count, ticks = 80, [f"tick-{i}" for i in range(6)]
    caller = Caller("ticked", embedder="provided")
    tenant, now = caller.tenant, timezone.now()
    # Idle for a month: the tick sends each of them to warm (activity rule: hot for 14 days).
    for i in range(count):
        memory(tenant, text=f"note {i} on the harbour ferry timetable", idle_days=30, now=now, seed=i)

    _enqueue("lifecycle.tasks.tick_tenant", (str(tenant.pk),), ticks)
    _finished(ticks)
    ran_on = _ran_on(nodes, ticks)
    assert all(ran_on.values()), f"a worker ran no tick: {ran_on}"

    runs = {run.pk: run for run in TickRun.objects.filter(tenant=tenant)}
    assert len(runs) == len(ticks)
    statuses = Counter(run.status for run in runs.values())
    assert set(statuses) <= {TickRun.Status.SUCCEEDED, TickRun.Status.SKIPPED}, statuses
    moves = list(
        JournalEntry.objects.filter(tenant=tenant, action="hot_to_warm")
        .order_by("pk")
        .values_list("episode_id_value", "tick_run_id")
    )
    # No episode moved twice, every one moved.
    assert len(moves) == count and len({episode for episode, _ in moves}) == count
    assert not Episode.objects.for_tenant(tenant).exclude(layer=Layer.WARM).exists()
    # One run moved them all (nothing touched them meanwhile); a tick that started on the other
    # worker while it ran was skipped, not run beside it.
    (mover,) = {runs[run] for _, run in moves}
    skipped = [run for run in runs.values() if run.status == TickRun.Status.SKIPPED]
    assert all(run.errors[0]["error"] == "another tick of this tenant is running" for run in skipped)
    beside = [run for run in skipped if mover.started_at <= run.started_at <= mover.finished_at]
    assert beside, f"no tick was tried while another ran ({statuses}): the test did not race"
    print(
        f"\n{len(ticks)} ticks of one tenant on two workers {ran_on}: {dict(statuses)}; the {count} moves "
        f"by one run of {mover.duration_ms} ms, {len(beside)} tick(s) refused the lock meanwhile"
    )


def test_the_index_repair_runs_once_across_the_workers(nodes):
    from episodes.models import Episode
    from episodes.stores.hot import hot_store
    from tests.lifecycle.factories import memory

    count = 60
    caller = Caller("repaired", embedder="provided")
    tenant, now, store = caller.tenant, timezone.now(), hot_store()
    ids = {
        memory(tenant, text=f"a remark {i} about the lighthouse", idle_days=0, now=now, seed=i)
        for i in range(count)
    }
    # Which worker's queue poll finds the tasks first is up to them: one may take them all while
    # the other sleeps. A round where only one worker ran proves nothing about the lock, so the
    # loss is made again and the repairs queued again, until both workers ran one (at most 20:
    # one worker can drain a round, the repairs after the first finding nothing to do, within the
    # other's 0.2 s poll; under the whole suite's load one did so ten rounds running).
    for attempt in range(20):
        repairs = [f"repair-{attempt}-{i}" for i in range(12)]
        # What a lost Redis leaves behind: episodes marked for re-indexing, their documents missing.
        for episode in Episode.objects.for_tenant(tenant):
            store.remove_episode(tenant.id.hex, episode.pk, list(episode.turns.values_list("pk", flat=True)))
        Episode.objects.for_tenant(tenant).update(needs_reindex=True)
        assert store.episode_ids(tenant.id.hex) == set()

        _enqueue("episodes.tasks.repair_hot_index", (), repairs)
        tasks = _finished(repairs)
        ran_on = _ran_on(nodes, repairs)
        results = sorted(task.result for task in tasks)
        # Each marked episode repaired once, by one of the workers: counted once.
        assert sum(results) == count, results
        assert store.episode_ids(tenant.id.hex) == ids
        assert store.count(tenant.id.hex) == count  # one turn each
        assert not Episode.objects.for_tenant(tenant).filter(needs_reindex=True).exists()
        if all(ran_on.values()):
            break
    else:
        raise AssertionError(f"twenty rounds and a worker ran no repair in any: {ran_on}")
    print(f"\n{len(repairs)} repairs on two workers ({ran_on}, round {attempt + 1}): repaired {results}")


def test_nodes_starting_together_write_each_schedule_once():
    """Each node runs `manage.py schedule_ticks` as it starts (bin/run): two at once leave one
    schedule of each kind, and copies that two nodes left before are put right."""
    from django_q.models import Schedule

    from lifecycle.tasks import REPAIR_SCHEDULE, SCHEDULE_PREFIX, SELF_SCHEDULE, SNAPSHOT_SCHEDULE

    tenants = [Caller(f"scheduled-{i}").tenant for i in range(3)]
    for _ in range(2):
        Schedule.objects.create(
            name=REPAIR_SCHEDULE,
            func="episodes.tasks.repair_hot_index",
            schedule_type=Schedule.MINUTES,
            minutes=1,
            repeats=-1,
        )
    environ = manage_py_environment()
    starts = [
        subprocess.Popen(
            [sys.executable, "manage.py", "schedule_ticks"],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [start.communicate(timeout=180)[0] for start in starts]
    assert [start.returncode for start in starts] == [0, 0], outputs
    names = Counter(Schedule.objects.values_list("name", flat=True))
    wanted = [f"{SCHEDULE_PREFIX}{tenant.pk}" for tenant in tenants]
    assert names == Counter([*wanted, REPAIR_SCHEDULE, SELF_SCHEDULE, SNAPSHOT_SCHEDULE]), names
