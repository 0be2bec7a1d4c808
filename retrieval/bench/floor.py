"""What a search cannot do without, timed apart, for `bench search` (docs/benchmarks.md#the-floor).

For each measured query, in the same run as the platform's own figures:

- the query's embedding alone (the local model, as a search without a caller vector pays it);
- one bare round trip to the tenant's hot index: its KNN and its full text, pipelined, ids only;
- one bare statement on its warm and cold rows: the nearest packed turns by pgvector and the packed
  turns matching the query's words by full text, ids only. Like the platform's, its full text ranks
  at most as many matches as the platform's plan for the tenant does (``archive.text_cap``):
  a common word matches thousands of a large tenant's turns, and ranking them all is work the
  platform does not do.

The floor of a query is the slower of the two stores (the platform may ask both at once), plus the
embedding where the platform embeds. What the platform adds above it (Python, the ranking, the
shapes, the priority, JSON, HTTP) is its p95 divided by the floor's. Then each part runs again
over every query, to read what it costs the processes (``cpu``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from episodes.language import TEXT_CONFIG, query_terms, query_text
from episodes.stores import archive
from episodes.stores.hot import hot_store
from episodes.stores.tables import EPISODES, TURNS
from memory_platform import db
from memory_platform.conf import memory_settings
from memory_platform.embeddings import get_embedder
from memory_platform.redis_client import get_redis, on_owner_of
from memory_platform.tenancy.models import Tenant

from . import cpu

_PACKED = (
    f"FROM {TURNS} t JOIN {EPISODES} e ON e.id = t.episode_id "
    "WHERE t.tenant_id = %s AND t.packed AND e.tenant_id = %s"
)
#: The nearest packed turns and the packed turns holding the query's words, in one statement; on
#: the exact plan (``{exact}`` is " + 0") the distance is computed for each of the tenant's rows, as
#: the platform does for a small tenant, instead of walking a graph shared with every other tenant.
_STATEMENT = (
    f"(SELECT t.id {_PACKED} AND t.embedding IS NOT NULL ORDER BY (t.embedding <=> %s::vector) {{exact}} LIMIT %s) "
    f"UNION ALL (SELECT m.id FROM (SELECT t.id, t.window_vector {_PACKED} "
    f"AND t.window_vector @@ plainto_tsquery('{TEXT_CONFIG}', %s) LIMIT %s) m "
    f"ORDER BY ts_rank(m.window_vector, plainto_tsquery('{TEXT_CONFIG}', %s)) DESC LIMIT %s)"
)


@dataclass
class Floor:
    """Milliseconds per query, by part."""

    embedding: list[float] = field(default_factory=list)
    hot: list[float] = field(default_factory=list)
    packed: list[float] = field(default_factory=list)
    #: Processor time per query of each part, by process (``cpu.per_call``).
    cpu: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def stores(self) -> list[float]:
        """Per query, the slower of the two stores (Redis alone for a tenant with nothing packed,
        whose ``packed`` is empty)."""
        if not self.packed:
            return list(self.hot)
        return [max(h, p) for h, p in zip(self.hot, self.packed, strict=True)]

    def with_embedding(self) -> list[float]:
        return [s + e for s, e in zip(self.stores(), self.embedding, strict=True)]


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def _run_each(calls: Sequence[Callable[[], object]]) -> None:
    for call in calls:
        call()


def _hot_query(index: str, vector: np.ndarray, words: Sequence[str], k: int) -> Callable[[], object]:
    blob = np.asarray(vector, dtype=np.float32).tobytes()
    text = "@text:(" + "|".join(words) + ")" if words else None

    def run() -> object:
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        # On a cluster, straight to the master of the tenant's slot, as the platform sends it.
        owner = on_owner_of(client, index)
        pipe.execute_command(
            "FT.SEARCH", index, f"*=>[KNN {k} @embedding $v]", "PARAMS", 2, "v", blob,
            "NOCONTENT", "LIMIT", 0, k, "DIALECT", 2, **owner,
        )  # fmt: skip
        if text:
            pipe.execute_command("FT.SEARCH", index, text, "NOCONTENT", "LIMIT", 0, k, "DIALECT", 2, **owner)
        return pipe.execute()

    return run


def _packed_args(tenant: Tenant, vector: list[float], lexemes: str, k: int, cap: int) -> list[object]:
    return [tenant.pk, tenant.pk, db.Vector(vector), k, tenant.pk, tenant.pk, lexemes, cap, lexemes, k]


def measure_floor(tenant: Tenant, queries: list[tuple[str, list[float]]]) -> Floor:
    """Each part of each query, timed alone (the same queries the platform is timed on)."""
    k = int(memory_settings.SEARCH_CANDIDATES)
    embedder = get_embedder("local")
    tenant_hex = tenant.id.hex
    index = hot_store().ensure_index(tenant_hex)
    exact = archive.exact_plan(tenant)
    cap = archive.text_cap(exact)
    # A tenant with nothing packed is never searched in Postgres (``archive.layers_version_if_any``).
    statement = _STATEMENT.format(exact="+ 0" if exact else "") if archive.packed_turns(tenant) else None
    floor = Floor()
    calls: dict[str, list[Callable[[], object]]] = {
        "embedding": [functools.partial(embedder.embed_one, text) for text, _ in queries],
        "hot": [
            _hot_query(index, np.asarray(vector), query_terms(text).words, k) for text, vector in queries
        ],
    }
    if statement:
        calls["packed"] = [
            functools.partial(
                db.fetch, statement, _packed_args(tenant, vector, query_text(text), k, cap), tenant=tenant
            )
            for text, vector in queries
        ]
    # Timed query by query, each part right after the other as a search would need them; then each
    # part again over every query, for what it costs the processes.
    for i in range(len(queries)):
        for name, each in calls.items():
            getattr(floor, name).append(_timed(each[i]))
    for name, each in calls.items():
        _, floor.cpu[name] = cpu.measured(len(each), _run_each, each)
    return floor
