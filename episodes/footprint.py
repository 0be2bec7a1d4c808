"""What a tenant's memories weigh in each store, measured rather than estimated: the bytes Redis
uses for its hot documents and its index, and the bytes Postgres uses for its episodes and turns by
layer. ``manage.py footprint`` prints them; the README's sizing table comes from it.

The hot quota counts an estimate (``Episode.hot_bytes``: the turns' text and vectors); Redis needs
more than that for the same episodes (each document's hash, the index's inverted lists, vectors and
document table). ``redis_over_quota`` is that ratio, which sizes a Redis for a number of tenants at
their quota.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db.models import Count, Sum

from memory_platform import db
from memory_platform.redis_client import get_redis, info_field, on_owner_of
from memory_platform.tenancy.models import Tenant

from .layers import Layer
from .models import Episode, Turn
from .stores import keys
from .stores.hot import hot_store

#: The parts of a RediSearch index's memory ``FT.INFO`` reports, in MB. Not ``offset_vectors_sz_mb``
#: (the words' positions): RediSearch 2.10 adds to it for every document indexed and never takes
#: back what the collector frees, so under churn it rises without end while Redis's memory stays
#: flat (docs/decisions/0057-an-hour-of-service.md). Left out, an index is undercounted by its
#: positions, about a byte a word.
INDEX_PARTS = (
    "inverted_sz_mb",
    "vector_index_sz_mb",
    "doc_table_size_mb",
    "sortable_values_size_mb",
    "key_table_size_mb",
    "tag_overhead_sz_mb",
    "text_overhead_sz_mb",
)
_MB = 1024 * 1024
#: Larger than any index here: a part reported above it is a counter that wrapped below zero.
_WRAPPED_MB = 1e9
#: Keys asked for their memory per round trip.
_BATCH = 500


@dataclass
class LayerFootprint:
    episodes: int = 0
    turns: int = 0
    #: Postgres bytes of the episodes' rows and of their turns' rows (columns as stored, TOAST
    #: included), with each table's indexes shared out by rows.
    postgres_bytes: int = 0

    @property
    def postgres_bytes_per_episode(self) -> int:
        return round(self.postgres_bytes / self.episodes) if self.episodes else 0


@dataclass
class Footprint:
    tenant: str
    layers: dict[str, LayerFootprint] = field(default_factory=dict)
    #: Redis: the tenant's documents (episode and turn hashes) and its index.
    redis_documents_bytes: int = 0
    redis_index_bytes: int = 0
    redis_keys: int = 0
    #: What the hot quota counts for the same episodes (``Episode.hot_bytes``).
    quota_bytes: int = 0

    @property
    def redis_bytes(self) -> int:
        return self.redis_documents_bytes + self.redis_index_bytes

    @property
    def redis_bytes_per_hot_episode(self) -> int:
        hot = self.layers.get(Layer.HOT)
        return round(self.redis_bytes / hot.episodes) if hot and hot.episodes else 0

    @property
    def redis_over_quota(self) -> float | None:
        return round(self.redis_bytes / self.quota_bytes, 2) if self.quota_bytes else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "layers": {
                layer: {**asdict(part), "postgres_bytes_per_episode": part.postgres_bytes_per_episode}
                for layer, part in self.layers.items()
            },
            "redis_documents_bytes": self.redis_documents_bytes,
            "redis_index_bytes": self.redis_index_bytes,
            "redis_bytes": self.redis_bytes,
            "redis_keys": self.redis_keys,
            "redis_bytes_per_hot_episode": self.redis_bytes_per_hot_episode,
            "quota_bytes": self.quota_bytes,
            "redis_over_quota": self.redis_over_quota,
        }


def _row_bytes(model: Any, alias: str) -> str:
    """The SQL sum of a row's stored column sizes (``pg_column_size`` counts a TOASTed value as
    stored, compressed or out of line), plus the tuple header."""
    columns = " + ".join(
        f"coalesce(pg_column_size({alias}.{f.column}), 0)" for f in model._meta.concrete_fields
    )
    return f"24 + {columns}"


def _index_share(table: str, rows: int) -> int:
    """A table's indexes shared out by rows: ``rows``' part of them."""
    found = db.fetch_one(
        "SELECT pg_indexes_size(%s::regclass), greatest(reltuples, 1)::bigint FROM pg_class WHERE oid = %s::regclass",
        [table, table],
        tenant=None,
    )
    if found is None:
        return 0
    index_bytes, table_rows = found
    return round(int(index_bytes) * min(1.0, rows / int(table_rows)))


def postgres_footprint(tenant: Tenant) -> dict[str, LayerFootprint]:
    episodes, turns = Episode._meta.db_table, Turn._meta.db_table
    layers: dict[str, LayerFootprint] = {layer: LayerFootprint() for layer in Layer}
    counted = (
        Episode.objects.filter(tenant=tenant)
        .values_list("layer")
        .annotate(n=Count("id"), turn_total=Sum("turn_count"))
    )
    for layer, n, turn_count in counted:
        layers[layer].episodes, layers[layer].turns = n, int(turn_count or 0)
    for layer, size in db.fetch(
        f"SELECT e.layer, sum({_row_bytes(Episode, 'e')})::bigint FROM {episodes} e "
        "WHERE e.tenant_id = %s GROUP BY e.layer",
        [tenant.pk],
        tenant=tenant,
    ):
        layers[layer].postgres_bytes += int(size)
    for layer, size in db.fetch(
        f"SELECT e.layer, sum({_row_bytes(Turn, 't')})::bigint FROM {turns} t "
        f"JOIN {episodes} e ON e.id = t.episode_id AND e.tenant_id = t.tenant_id "
        "WHERE t.tenant_id = %s GROUP BY e.layer",
        [tenant.pk],
        tenant=tenant,
    ):
        layers[layer].postgres_bytes += int(size)
    for part in layers.values():
        part.postgres_bytes += _index_share(episodes, part.episodes) + _index_share(turns, part.turns)
    return {layer: part for layer, part in layers.items() if part.episodes}


def _memory_usage(client: Any, names: Iterable[bytes]) -> int:
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.memory_usage(name, samples=0)
    return sum(int(used or 0) for used in pipe.execute())


def redis_footprint(tenant: Tenant, into: Footprint) -> None:
    client = get_redis()
    tenant_hex = tenant.id.hex
    batch: list[bytes] = []
    for name in client.scan_iter(match=keys.tenant_pattern(tenant_hex), count=1000):
        batch.append(name)
        if len(batch) == _BATCH:
            into.redis_documents_bytes += _memory_usage(client, batch)
            into.redis_keys += len(batch)
            batch = []
    if batch:
        into.redis_documents_bytes += _memory_usage(client, batch)
        into.redis_keys += len(batch)
    store = hot_store()
    index = store.index_name(tenant_hex)
    if index in store.index_names():
        into.redis_index_bytes = index_bytes(
            client.execute_command("FT.INFO", index, **on_owner_of(client, index))
        )


def index_bytes(info: Any) -> int:
    """The bytes of a RediSearch index, the ``INDEX_PARTS`` of its ``FT.INFO`` reply summed."""
    # RediSearch 2.10 keeps some of these as unsigned counters that wrap below zero once
    # documents are removed (read as ~1.8e13 MB): such a part is left out, not summed.
    parts = [float(info_field(info, part, 0) or 0) for part in INDEX_PARTS]
    return round(sum(mb for mb in parts if 0 <= mb < _WRAPPED_MB) * _MB)


def footprint(tenant: Tenant) -> Footprint:
    """``tenant``'s memories as stored: Postgres by layer, Redis for its hot tier."""
    measured = Footprint(tenant=tenant.name, layers=postgres_footprint(tenant))
    measured.quota_bytes = int(
        Episode.objects.filter(tenant=tenant, layer=Layer.HOT).aggregate(total=Sum("hot_bytes"))["total"] or 0
    )
    redis_footprint(tenant, measured)
    return measured
