"""Redis restarted under a large tenant: how long from the stop until the tenant's hot index is
complete again and a search answers (docs/benchmarks.md). Run beside the embedded Redis, with a
tenant that has a hot tier, e.g. one kept by `bench search --sizes 100000 --keep`:

    TENANT=bench-search-100000-... .venv/bin/python manage.py shell < benchmarks/redis_restart.py

It stops and starts the embedded Redis (as `manage.py services stop` and `start` do); searches
meanwhile answer degraded, from Postgres."""

import os
import time

import numpy as np
from django.conf import settings
from django.utils import timezone

from episodes.stores.hot import hot_store
from memory_platform.tenancy.models import Tenant
from retrieval.query import SearchQuery
from retrieval.services import search

tenant = Tenant.objects.get(name=os.environ["TENANT"])
client = hot_store().client
embedded = settings.EMBEDDED_REDIS
rng = np.random.default_rng(3)


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def indexes():
    """The tenant's hot indexes: name -> (documents, still indexing, share indexed)."""
    found = {}
    for name in map(text, client.execute_command("FT._LIST")):
        if tenant.pk.hex in name:
            info = client.execute_command("FT.INFO", name)
            if not isinstance(info, dict):
                info = dict(zip(info[::2], info[1::2], strict=True))
            info = {text(k): v for k, v in info.items()}
            found[name] = (int(info["num_docs"]), int(info["indexing"]), float(info["percent_indexed"]))
    return found


def one_search():
    vector = rng.normal(size=384).astype(np.float32)
    query = SearchQuery(
        text="what did we decide about the trip", vector=vector / np.linalg.norm(vector), limit=10
    )
    return search(tenant=tenant, query=query, now=timezone.now())


before = indexes()
result = one_search()
print(
    f"before: {before}, {client.dbsize()} keys, {client.info('memory')['used_memory_human']}, "
    f"search degraded {result.degraded}, {len(result.hits)} hits"
)
began = time.perf_counter()
embedded.stop()
stopped = time.perf_counter() - began
began = time.perf_counter()
embedded.start(timeout=120)
started = time.perf_counter() - began
began = time.perf_counter()
while time.perf_counter() - began < 300:
    try:
        now_ = indexes()
    except Exception:  # noqa: BLE001 - still starting
        now_ = {}
    if now_ and all(v[1] == 0 and v[0] >= before.get(k, (0,))[0] for k, v in now_.items()):
        break
    time.sleep(0.05)
indexed = time.perf_counter() - began
began = time.perf_counter()
result = one_search()
searched = time.perf_counter() - began
print(
    f"stop (the data flushed, the process gone) {stopped:.2f} s; start until it answers and is "
    f"not loading {started:.2f} s; then the tenant's index complete {indexed:.2f} s; first search "
    f"{searched * 1000:.1f} ms, degraded {result.degraded}, {len(result.hits)} hits"
)
print(f"stop to a complete index: {stopped + started + indexed:.2f} s; {indexes()}")
