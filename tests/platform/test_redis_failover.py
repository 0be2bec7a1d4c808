"""A master of the cluster killed during ingest and search: no acknowledged turn is lost (Postgres
is the record), only the tenants of that master answer `degraded` meanwhile, its replica takes
over, and the repair the tick runs indexes what missed the hot tier, with no operator step
(docs/decisions/0052-hot-tier-on-redis-cluster.md)."""

import os
import signal
import time

import pytest
from django.conf import settings

from episodes.stores import hot
from lifecycle.hotsync import hot_repair
from memory_platform.redis_client import get_redis, tenant_tag

from ..conftest import Caller, unit_vectors

pytestmark = pytest.mark.django_db(transaction=True)

FAILOVER_WITHIN = 60.0  # seconds; cluster-node-timeout is 5 s


@pytest.fixture(scope="module")
def failover_cluster():
    """Three masters with a replica each, for this module only (it kills one of them)."""
    from memory_platform.embedded.redis_cluster import EmbeddedRedisCluster

    cluster = EmbeddedRedisCluster(
        settings.VAR_DIR, masters=3, replicas=1, maxmemory="256mb", name="redis-cluster-failover"
    )
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def on_failover_cluster(failover_cluster):
    single_url, single_store = settings.REDIS_URL, hot._store
    settings.REDIS_URL, hot._store = failover_cluster.url(), None
    get_redis().flushdb()
    try:
        yield failover_cluster
    finally:
        settings.REDIS_URL, hot._store = single_url, single_store


def master_port(caller: Caller) -> int:
    return int(get_redis().get_node_from_key(tenant_tag(caller.tenant.id.hex)).port)


def write(caller: Caller, texts: list[str], seed: int) -> dict:
    body = caller.post(
        "/api/v1/turns",
        {
            "session_id": "s1",
            "turns": [
                {"role": "user", "text": text, "vector": vector.tolist(), "episode_boundary": True}
                for text, vector in zip(texts, unit_vectors(len(texts), seed=seed), strict=True)
            ],
        },
    )
    assert body.status_code == 201, body.json()  # acknowledged
    return body.json()


def degraded(caller: Caller) -> bool:
    body = caller.post("/api/v1/search", {"query": "harbour note", "limit": 50})
    assert body.status_code == 200, body.json()
    return bool(body.json()["degraded"])


def test_a_master_killed_mid_ingest_loses_no_turn_and_degrades_only_its_tenants(on_failover_cluster):
    from episodes.models import Turn

    cluster = on_failover_cluster
    ours = Caller("on-the-lost-master", embedder="provided")
    lost = master_port(ours)
    others = [Caller(f"elsewhere-{n}", embedder="provided") for n in range(6)]
    others = [caller for caller in others if master_port(caller) != lost][:1]
    assert others, "six tenants all on one master"
    (theirs,) = others
    written = {ours: 0, theirs: 0}
    for caller, seed in ((ours, 1), (theirs, 2)):
        write(caller, [f"harbour note {i} of {caller.tenant.name}" for i in range(5)], seed)
        written[caller] += 5
        assert not degraded(caller)

    pid = cluster.pid(lost)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    seen_degraded, theirs_degraded, step = [], [], 0
    deadline = time.monotonic() + FAILOVER_WITHIN
    while time.monotonic() < deadline:
        step += 1
        for caller in (ours, theirs):
            write(caller, [f"harbour note late {step} of {caller.tenant.name}"], 100 + step)
            written[caller] += 1
        theirs_degraded.append(degraded(theirs))
        seen_degraded.append(degraded(ours))
        if len(seen_degraded) > 2 and not any(seen_degraded[-2:]):
            break  # the replica answers for the lost master's slots
        time.sleep(0.5)
    assert any(seen_degraded), "the lost master's tenant was never degraded: the kill went unseen"
    assert not any(seen_degraded[-2:]), f"no replica took over within {FAILOVER_WITHIN:.0f} s"
    assert not any(theirs_degraded), f"a tenant of another master answered degraded: {theirs_degraded}"
    assert master_port(ours) != lost
    print(
        f"failover: the replica answered {time.monotonic() - killed:.1f} s after the kill; "
        f"{sum(seen_degraded)} of {len(seen_degraded)} searches of the lost master's tenant degraded, "
        f"0 of {len(theirs_degraded)} of the other's; {written[ours]} + {written[theirs]} turns acknowledged"
    )

    # The repair the tick runs (every minute) indexes what the outage kept from the hot tier.
    for caller in (ours, theirs):
        hot_repair(tenant=caller.tenant)
    store = hot.hot_store()
    for caller in (ours, theirs):
        stored = Turn.objects.across_tenants("test").filter(tenant=caller.tenant).count()
        assert stored == written[caller]  # every acknowledged turn is in Postgres
        assert store.count(caller.tenant.id.hex) == written[caller]  # and found in the hot tier
        assert not degraded(caller)
