"""The hot tier, counters and rate limits on a Redis Cluster: the URL, every tenant key in its
tenant's slot, tenants spread over the masters, and a tenant whose slot moves to another master
(docs/decisions/0052-hot-tier-on-redis-cluster.md). The hot store's and search's own tests run on
the cluster too (``redis_deployment``)."""

import random
import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured
from redis.crc import key_slot

from episodes.scope import Scope
from episodes.stores import keys
from memory_platform import counters, ratelimit
from memory_platform.embedded.redis_cluster import slot_ranges
from memory_platform.redis_client import ClusterAddress, get_redis, hash_tag, refusing_writes, tenant_tag
from memory_platform.settings import redis_from_url

from ..conftest import unit_vectors


def slot(key: str) -> int:
    return key_slot(key.encode())


def test_a_cluster_url_names_its_nodes_and_credentials():
    address = ClusterAddress.parse("redis+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2:7001/0")
    assert address.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert (address.username, address.password, address.tls) == ("app", "s@cret", False)
    assert ClusterAddress.parse("rediss+cluster://:pw@h:1").tls
    assert redis_from_url("redis+cluster://h:1,h:2") == "redis+cluster://h:1,h:2"
    for wrong in ("redis+cluster://h", "redis+cluster://h:x", "redis+cluster://h:1/3", "redis+cluster://"):
        with pytest.raises(ImproperlyConfigured):
            redis_from_url(wrong)


def test_every_key_of_a_tenant_is_in_its_slot():
    tenant = uuid.uuid4()
    own = slot(tenant_tag(tenant.hex))
    names = [
        keys.turn_key(tenant.hex, 1),
        keys.episode_key(tenant.hex, 2),
        keys.index_name(tenant.hex, "FLAT"),
        keys.index_name(tenant.hex, "HNSW"),
        counters.key_of(tenant),
        counters.key_of(str(tenant)),
        counters.key_of(f"keys:{tenant}"),
        ratelimit._Window.of(f"key:mp_{tenant.hex[:8]}", ratelimit.Rate(5, 1), 0.0, tenant).key,
        ratelimit._Window.of(f"tenant:{tenant}", ratelimit.Rate(5, 60), 0.0, tenant).key,
    ]
    assert {slot(name) for name in names} == {own}
    # What belongs to no tenant may be anywhere.
    # Not under the documents' prefix, which the tenant's index covers (and a rebuild drops).
    assert not any(name.startswith(tenant_tag(tenant.hex)) for name in names[4:])
    assert counters.key_of(counters.PLATFORM) == "mp:metrics:platform"
    assert ratelimit._Window.of("authfail:api:10.0.0.1", ratelimit.Rate(5, 60), 0.0).key.startswith("mp:rl:")


def test_a_thousand_tenants_spread_evenly_over_three_masters():
    rng = random.Random(39)
    ranges = slot_ranges(3)
    per_master = [0, 0, 0]
    for _ in range(1000):
        tenant = uuid.UUID(int=rng.getrandbits(128), version=4)
        found = slot(tenant_tag(tenant.hex))
        per_master[next(i for i, (lo, hi) in enumerate(ranges) if lo <= found <= hi)] += 1
    assert all(250 <= n <= 420 for n in per_master), per_master
    assert sum(per_master) == 1000


def test_counters_and_rate_limits_on_the_cluster(db, redis_cluster, settings):
    settings.REDIS_URL = redis_cluster.url()
    client = get_redis()
    client.flushdb()
    tenant = uuid.uuid4()
    counters.add(tenant, "searches", 2, path="hot")
    counters.add(counters.PLATFORM, "requests")
    read = counters.read([tenant, counters.PLATFORM])
    assert counters.total(read[str(tenant)], "searches") == 2
    assert counters.total(read[counters.PLATFORM], "requests") == 1
    assert client.exists(counters.key_of(tenant)) == 1
    assert counters.erase(tenant) == 1 and counters.read([tenant])[str(tenant)] == {}

    rate = ratelimit.Rate(2, 60)
    buckets = [(f"tenant:{tenant}", rate)]
    assert ratelimit.hit_all(buckets, 120.0, tenant=tenant) is None
    assert ratelimit.hit_all(buckets, 121.0, tenant=tenant) is None
    assert ratelimit.hit_all(buckets, 122.0, tenant=tenant) == pytest.approx(58.0)
    assert ratelimit.over_all(buckets, 123.0, tenant=tenant) == pytest.approx(57.0)
    assert refusing_writes(client) == ""


def test_the_apis_rate_limit_windows_are_in_the_tenants_slot(caller, redis_cluster, settings):
    """A request's windows (its key's and its tenant's) carry the tenant's hash tag, so on a
    cluster both are counted on the master of the tenant's slot, in one round trip."""
    from django.test import override_settings

    counters.flush()  # earlier counts belong to the single server
    settings.REDIS_URL = redis_cluster.url()
    client = get_redis()
    client.flushdb()
    try:
        limits = {**settings.MEMORY, "RATE_LIMIT": "2/min", "TENANT_RATE_LIMIT": "100/min"}
        with override_settings(MEMORY=limits):
            codes = [caller.get("/api/v1/whoami").status_code for _ in range(3)]
        # Two windows of a minute: the third request falls in the same minute unless the test
        # straddled one (then it is answered again, in a new window).
        assert codes[:2] == [200, 200] and codes[2] in (200, 429)
        tag = hash_tag(caller.tenant.id.hex)
        windows = sorted(k.decode() for k in client.scan_iter(match="mp:rl:*"))
        assert windows and all(k.startswith(f"mp:rl:{tag}:") for k in windows), windows
        assert {k.split(":")[3] for k in windows} == {"key", "tenant"}
        assert any(f":key:{caller.key.prefix}:" in k for k in windows)
        assert {slot(k) for k in windows} == {slot(tag)}
        owner = client.get_node_from_key(tag)
        assert all(client.get_node_from_key(k) == owner for k in windows)
    finally:
        counters.flush()  # this test's counts go to the cluster, before settings are restored


def test_counters_written_before_the_hash_tag_are_added_to_the_tagged_ones(db):
    client = get_redis()
    tenant = uuid.uuid4()
    client.hset(f"mp:metrics:{tenant}", mapping={"searches|path=hot": 3, "search_ms_sum": 1.5})
    client.hset(f"mp:metrics:keys:{tenant}", mapping={"key_uses|key=ab": 4})
    client.hset("mp:metrics:platform", mapping={"requests": 7})
    counters._adopted.clear()
    counters.add(tenant, "searches", 1, path="hot")
    read = counters.read([tenant, f"keys:{tenant}", counters.PLATFORM])
    assert counters.total(read[str(tenant)], "searches") == 4
    assert read[str(tenant)]["search_ms_sum"].total() == pytest.approx(1.5)
    assert counters.total(read[f"keys:{tenant}"], "key_uses") == 4
    assert counters.total(read[counters.PLATFORM], "requests") == 7
    assert not client.exists(f"mp:metrics:{tenant}", f"mp:metrics:keys:{tenant}")
    # Once per deployment: a key written the old way afterwards (an old process still running)
    # is left for the erasure to find by its old name only if it looked; it does not look again.
    assert client.exists(counters.TAGGED_MARKER)


def _move_slot(cluster, tag: str) -> int:
    """Reshard one slot to the next master, as `redis-cli --cluster reshard` does: mark it
    importing and migrating, MIGRATE its keys, give it to the new master everywhere."""
    clients = {port: cluster._client(port) for port in cluster.ports()}
    ids = {port: c.execute_command("CLUSTER", "MYID").decode() for port, c in clients.items()}
    slot_number = slot(tag)
    owner = int(get_redis().get_node_from_key(tag).port)
    ports = list(clients)
    target = ports[(ports.index(owner) + 1) % len(ports)]
    src, dst = clients[owner], clients[target]
    dst.execute_command("CLUSTER", "SETSLOT", slot_number, "IMPORTING", ids[owner])
    src.execute_command("CLUSTER", "SETSLOT", slot_number, "MIGRATING", ids[target])
    while names := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot_number, 100):
        src.execute_command(
            "MIGRATE", "127.0.0.1", target, "", 0, 5000, "AUTH", cluster.password(), "KEYS", *names
        )
    for c in clients.values():
        c.execute_command("CLUSTER", "SETSLOT", slot_number, "NODE", ids[target])
    return target


@pytest.mark.django_db(transaction=True)
def test_a_tenant_whose_slot_moves_to_another_master_is_still_found(provided, redis_cluster, settings):
    from episodes.stores import hot

    settings.REDIS_URL = redis_cluster.url()
    get_redis().flushdb()
    hot._store = None
    try:
        vectors = unit_vectors(6, seed=71)
        body = provided.post(
            "/api/v1/turns",
            {
                "session_id": "s1",
                "turns": [
                    {"role": "user", "text": f"the lighthouse keeper's note {i}", "vector": v.tolist()}
                    for i, v in enumerate(vectors)
                ],
            },
        )
        assert body.status_code == 201, body.json()
        tenant_hex = provided.tenant.id.hex
        store = hot.hot_store()

        def found():
            by_vector, by_text, _ = store.search(
                tenant_hex, vector=vectors[3], text="lighthouse keeper", scope=Scope(states=("active",)), k=10
            )
            return [(h.doc_id, round(h.score, 5)) for h in by_vector], sorted(h.doc_id for h in by_text)

        before = found()
        assert len(before[0]) == len(before[1]) == 6
        target = _move_slot(redis_cluster, tenant_tag(tenant_hex))
        # This process's clients still think the old master holds the slot: MOVED is followed,
        # the new master has no index of the tenant yet, and one is made over the documents there.
        assert found() == before
        listed = redis_cluster._client(target).execute_command("FT._LIST")
        assert store.index_name(tenant_hex).encode() in listed
        # FT._LIST through the cluster client asks every master (an erasure counts indexes so).
        assert store.index_name(tenant_hex).encode() in store.client.execute_command("FT._LIST")
    finally:
        hot._store = None


@pytest.mark.django_db(transaction=True)
def test_a_tenants_search_goes_to_its_master_only_and_is_never_redirected(provided, redis_cluster, settings):
    from episodes.stores import hot

    settings.REDIS_URL = redis_cluster.url()
    get_redis().flushdb()
    hot._store = None
    try:
        vectors = unit_vectors(4, seed=81)
        body = provided.post(
            "/api/v1/turns",
            {
                "session_id": "s1",
                "turns": [
                    {
                        "role": "user",
                        "text": f"a note on tides {i}",
                        "vector": v.tolist(),
                        "episode_boundary": True,
                    }
                    for i, v in enumerate(vectors)
                ],
            },
        )
        assert body.status_code == 201, body.json()
        tenant_hex = provided.tenant.id.hex
        store = hot.hot_store()
        store.search(tenant_hex, vector=vectors[0], text="tides note", scope=Scope(), k=5)  # index made
        owner = int(get_redis().get_node_from_key(tenant_tag(tenant_hex)).port)
        masters = {port: redis_cluster._client(port) for port in redis_cluster.ports()}
        for client in masters.values():
            client.config_resetstat()
        for _ in range(5):
            by_vector, by_text, _ = store.search(
                tenant_hex, vector=vectors[1], text="tides note", scope=Scope(), k=5
            )
            assert len(by_vector) == len(by_text) == 4

        def searches(client):
            stats = client.info("commandstats")
            return stats.get("cmdstat_FT.SEARCH", {})

        # Two BM25 queries and one KNN query per search, all sent to the tenant's master and
        # answered there: a query sent elsewhere would be counted there (as rejected: MOVED).
        assert searches(masters[owner]).get("calls") == 15
        assert not searches(masters[owner]).get("rejected_calls")
        assert all(not searches(client) for port, client in masters.items() if port != owner)
    finally:
        hot._store = None
