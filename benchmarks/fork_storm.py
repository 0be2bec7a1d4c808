"""Many tenants writing at once: how often RediSearch's collector forks Redis, and what every other
request waits meanwhile (docs/decisions/0060-ballast-against-the-idf-wrap.md). Run beside the
embedded Redis (`manage.py services start`):

    T=300 P=10 .venv/bin/python manage.py shell < benchmarks/fork_storm.py

It makes T tenants' hot indexes of 100 documents each (with their ballast), pads Redis with PAD MB
of plain strings (a fork's cost grows with Redis's memory; `maxmemory` is raised for the run and
put back), then for 30 s per collector threshold (TH, default "1,32") has each tenant write a
turn every P seconds (two documents rewritten) while another client PINGs every 2 ms. Everything
it wrote is removed at the end and the embedded server's threshold set back."""

import os
import threading
import time
import uuid

import numpy as np

from episodes.stores import keys
from episodes.stores.hot import HotStore
from memory_platform.embedded.redis import GC_SETTINGS
from memory_platform.redis_client import get_redis

client = get_redis()
store = HotStore()
TENANTS = int(os.environ.get("T", "300"))
EVERY = float(os.environ.get("P", "10"))
PAD_MB = int(os.environ.get("PAD", "800"))
SECONDS = 30
DOCS = 100

maxmemory = str(client.config_get("maxmemory")["maxmemory"])
client.config_set("maxmemory", str(3 * 1024**3))
rng = np.random.default_rng(1)
tenants = [uuid.uuid4().hex for _ in range(TENANTS)]


def forks():
    return int(client.info("stats")["total_forks"])


def storm(threshold):
    client.execute_command("FT.CONFIG", "SET", "FORK_GC_CLEAN_THRESHOLD", threshold)
    time.sleep(6)  # one run of the collector under the new threshold
    waits = []
    stop = time.time() + SECONDS

    def ping():
        other = get_redis()
        while time.time() < stop:
            start = time.perf_counter()
            other.ping()
            waits.append((time.perf_counter() - start) * 1000)
            time.sleep(0.002)

    pinger = threading.Thread(target=ping)
    pinger.start()
    before, rewrites, k = forks(), 0, 0
    while time.time() < stop:
        tenant, i = tenants[k % TENANTS], (k // TENANTS) % DOCS
        k += 1
        for key in (keys.turn_key(tenant, i), keys.turn_key(tenant, (i + 1) % DOCS)):
            fields = dict(client.hgetall(key))
            client.delete(key)
            client.hset(key, mapping=fields)  # type: ignore[arg-type]
            rewrites += 1
        time.sleep(EVERY / TENANTS)
    pinger.join()
    print(
        f"threshold {threshold:>3}: {rewrites} rewrites in {SECONDS} s, {forks() - before} forks, "
        f"latest_fork_usec {client.info('stats')['latest_fork_usec']}, PING p50 "
        f"{np.percentile(waits, 50):.2f} p99 {np.percentile(waits, 99):.2f} max {max(waits):.1f} ms"
    )


try:
    started = time.time()
    for tenant in tenants:
        store.ensure_index(tenant)
        pipe = client.pipeline(transaction=False)
        for i in range(DOCS):
            pipe.hset(
                keys.turn_key(tenant, i),
                mapping={
                    "text": f"alice went to the market number {i} with bob",
                    "tenant": tenant,
                    "doctype": keys.DOC_TURN,
                    "embedding": rng.standard_normal(384).astype(np.float32).tobytes(),
                },
            )
        pipe.execute()
    pipe = client.pipeline(transaction=False)
    for i in range(PAD_MB):
        pipe.set(f"mp:bench:pad:{i}", b"x" * 2**20)
    pipe.execute()
    used = client.info("memory")["used_memory"] / 2**20
    print(f"{TENANTS} tenants loaded in {time.time() - started:.0f} s; Redis holds {used:.0f} MB")
    time.sleep(12)  # the collector done with the load
    for threshold in os.environ.get("TH", "1,32").split(","):
        storm(int(threshold))
finally:
    client.execute_command(
        "FT.CONFIG", "SET", "FORK_GC_CLEAN_THRESHOLD", GC_SETTINGS["FORK_GC_CLEAN_THRESHOLD"]
    )
    for tenant in tenants:
        store.drop_tenant(tenant)
    for start in range(0, PAD_MB, 100):
        client.delete(*(f"mp:bench:pad:{i}" for i in range(start, min(start + 100, PAD_MB))))
    client.config_set("maxmemory", maxmemory)
