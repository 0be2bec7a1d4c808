"""What `bench soak` reads between its operations: memory of the processes, Postgres' dead tuples
and GIN indexes, and the soak tenants' RediSearch indexes. Every reading is taken as it is; one
that cannot be taken (Redis down during the restart) is None, never a guess.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

import psutil
import redis
from django.db import connection
from django.db.models import Count

from episodes.footprint import index_bytes
from episodes.models import Episode
from episodes.stores import keys
from episodes.stores.hot import hot_store
from memory_platform.redis_client import get_redis, info_field, on_owner_of
from memory_platform.tenancy.models import Tenant

from .processes import embedded_pid, tree

_MB = 1024 * 1024
#: The tables ``n_dead_tup`` names one by one (the others are summed only).
TOP_DEAD = 3


def _rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return round(psutil.Process(pid).memory_info().rss / _MB, 1)
    except psutil.Error:
        return None


def _postgres_mb(pid: int | None) -> float | None:
    """The postmaster and every backend, PSS summed: each process's RSS counts the shared buffers
    it has touched, so a sum of RSS counts them once per backend; PSS shares them out."""
    processes = tree(pid)
    if processes is None:
        return None
    total = 0
    for process in processes:
        try:
            total += process.memory_full_info().pss
        except psutil.AccessDenied:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue  # a backend that ended meanwhile
    return round(total / _MB, 1)


def memory() -> dict[str, float | None]:
    """MB: this process (RSS), the embedded Redis (RSS) and Postgres (PSS); None when external."""
    return {
        "self_mb": _rss_mb(os.getpid()),
        "redis_mb": _rss_mb(embedded_pid("EMBEDDED_REDIS")),
        "postgres_mb": _postgres_mb(embedded_pid("EMBEDDED_POSTGRES")),
    }


def dead_tuples() -> dict[str, Any]:
    """``n_dead_tup`` of the database's tables: summed, and the ``TOP_DEAD`` largest by name."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, n_dead_tup FROM pg_stat_user_tables ORDER BY n_dead_tup DESC")
        rows = cursor.fetchall()
    return {"total": sum(n for _, n in rows), "top": [[name, n] for name, n in rows[:TOP_DEAD] if n]}


def gin_support() -> str:
    """How the GIN pending lists can be read here: "pgstattuple", or why not (a sentence)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT installed_version FROM pg_available_extensions WHERE name = 'pgstattuple'")
        row = cursor.fetchone()
    if row is None:
        return (
            "this Postgres has no pgstattuple extension: GIN pending lists not read, GIN index sizes instead"
        )
    if row[0] is None:
        # A benchmark does not change the schema; an operator may.
        return (
            "pgstattuple is not installed (CREATE EXTENSION pgstattuple reads the pending lists): "
            "GIN index sizes instead"
        )
    return "pgstattuple"


def gin(support: str) -> dict[str, Any]:
    """The GIN indexes: their MB summed, and their pending-list pages (with ``pgstattuple``; None
    otherwise). Only an index with ``fastupdate`` on (the default) has a pending list."""
    pending = "pgstatginindex(i.oid)).pending_pages" if support == "pgstattuple" else "NULL::bigint)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT i.relname, pg_relation_size(i.oid),
                       coalesce(i.reloptions, '{{}}') @> ARRAY['fastupdate=off'], ({pending}
                FROM pg_class i JOIN pg_am am ON am.oid = i.relam JOIN pg_namespace n ON n.oid = i.relnamespace
                WHERE am.amname = 'gin' AND n.nspname = current_schema()"""
        )
        rows = cursor.fetchall()
    return {
        "size_mb": round(sum(size for _, size, _, _ in rows) / _MB, 1),
        "pending_pages": None if support != "pgstattuple" else sum(p or 0 for *_, p in rows),
        "fastupdate": sorted(name for name, _, off, _ in rows if not off),
    }


def hnsw() -> dict[str, Any]:
    """The HNSW graphs of packed vectors: MB by index and summed. A graph keeps an entry for every
    dead row until a vacuum (of its table) reaches it, and each insert walks what it holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT i.relname, pg_relation_size(i.oid)
               FROM pg_class i JOIN pg_am am ON am.oid = i.relam JOIN pg_namespace n ON n.oid = i.relnamespace
               WHERE am.amname = 'hnsw' AND n.nspname = current_schema() ORDER BY i.relname"""
        )
        rows = cursor.fetchall()
    return {
        "size_mb": round(sum(size for _, size in rows) / _MB, 2),
        "by_index": {name: round(size / _MB, 2) for name, size in rows},
    }


def redisearch(tenants: Sequence[Tenant]) -> dict[str, Any] | None:
    """The soak tenants' hot indexes summed: documents (``FT.INFO``), the entries their inverted
    indexes hold (``index_entries``: a removed document's stay until the collector runs), bytes
    (``footprint.index_bytes``), and the bytes the collector has freed since Redis started. None
    while Redis does not answer. ``FT.INFO``'s own ``num_records`` is kept as ``records`` but not
    judged: RediSearch 2.10 counts each vector ever indexed in it and never subtracts a removed
    one, so under churn it rises without end whatever the index holds."""
    client, store = get_redis(), hot_store()
    totals: Counter[str] = Counter()
    try:
        for tenant in tenants:
            name = store.index_name(tenant.id.hex)
            try:
                info = client.execute_command("FT.INFO", name, **on_owner_of(client, name))
            except redis.ResponseError:
                continue  # no hot episode yet: no index
            totals["docs"] += int(info_field(info, "num_docs", 0))
            totals["records"] += int(info_field(info, "num_records", 0))
            totals["entries"] += index_entries(client, name)
            totals["bytes"] += index_bytes(info)
            totals["vector_bytes"] += round(float(info_field(info, "vector_index_sz_mb", 0)) * _MB)
            gc = info_field(info, "gc_stats", {})
            totals["gc_bytes_collected"] += round(float(info_field(gc, "bytes_collected", 0) or 0))
    except (redis.RedisError, OSError):
        return None
    docs = totals["docs"]
    return {
        **totals,
        "entries_per_doc": round(totals["entries"] / docs, 2) if docs else None,
        "bytes_per_doc": round(totals["bytes"] / docs) if docs else None,
    }


def index_entries(client: Any, name: str) -> int:
    """The entries a hot index's inverted indexes hold, counted one by one (``FT.DEBUG``): each
    term's (a stem's too) documents, each tag value's, the numeric field's. Dead ones the collector
    has not reached yet are among them. A round trip per term: for the soak's own small
    indexes, never a real tenant's."""
    target = on_owner_of(client, name)
    fields = keys.hot_schema("0" * 32, 1)["fields"]
    entries = 0
    for term in client.execute_command("FT.DEBUG", "DUMP_TERMS", name, **target):
        entries += len(client.execute_command("FT.DEBUG", "DUMP_INVIDX", name, term, **target))
    for field in (f["name"] for f in fields if f["type"] == "tag"):
        values = client.execute_command("FT.DEBUG", "DUMP_TAGIDX", name, field, **target)
        entries += sum(len(ids) for _, ids in values)
    for field in (f["name"] for f in fields if f["type"] == "numeric"):
        summary = client.execute_command("FT.DEBUG", "NUMIDX_SUMMARY", name, field, **target)
        entries += int(info_field(summary, "numEntries", 0))
    return entries


def layers(tenants: Sequence[Tenant]) -> dict[str, int]:
    """The soak tenants' episodes: hot, warm and cold ones that are visible, and forgotten ones."""
    counts: Counter[str] = Counter()
    for tenant in tenants:
        for layer, state, n in (
            Episode.objects.for_tenant(tenant)
            .order_by()
            .values_list("layer", "state")
            .annotate(n=Count("pk"))
        ):
            counts["forgotten" if state == "forgotten" else layer] += n
    return {key: counts[key] for key in ("hot", "warm", "cold", "forgotten")}


def read_all(tenants: Sequence[Tenant], support: str) -> dict[str, Any]:
    return {
        "memory": memory(),
        "dead_tuples": dead_tuples(),
        "gin": gin(support),
        "hnsw": hnsw(),
        "redisearch": redisearch(tenants),
        "episodes": layers(tenants),
    }
