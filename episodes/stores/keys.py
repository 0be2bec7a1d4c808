"""The one module that names Redis keys and indexes.

Every key is ``mp:{<tenant hex>}:...``: the braces make the tenant a hash tag, so one tenant's keys
share a cluster slot and tenants can be spread over a Redis Cluster (docs/concepts.md#where-things-live).
"""

from __future__ import annotations

from memory_platform.redis_client import tenant_tag

INDEX_BASE = "mp:idx:hot:v6"
ALGORITHMS = ("FLAT", "HNSW")
# Per-tenant indexes of earlier versions whose documents this version reads as they are: dropped
# when found, their documents kept and scanned in by the tenant's new index (``keys.BACKFILL_MARKER``).
# v5: FLAT vector blocks of RediSearch's default 1,024 vectors (see ``VECTOR_BLOCK``).
REINDEXED_BASES = ("mp:idx:hot:v5",)
# Per-tenant indexes of earlier versions whose documents hold tag values this version does not
# filter correctly (raw, not `exact`): dropped with their documents when found; `rebuild_hot`
# (make run does it on start) indexes the tenants again from Postgres.
# v3: no per-document language (every document was analysed as English).
# v4: text as written, so its capitalised Cyrillic words were never found (`language.hot_text`).
OUTDATED_BASES = ("mp:idx:hot:v2", "mp:idx:hot:v3", "mp:idx:hot:v4")
# Earlier hot indexes: one shared by every tenant (v1), under three names over the years. Dropped
# when found (their documents stay and are indexed again by the tenants' own indexes).
LEGACY_INDEXES = ("mp:idx:hot:v1", "mp:idx:hot:v1:flat", "mp:idx:hot:v1:hnsw")


# Set when an index over existing documents is dropped (its name as the value): new tenant indexes
# then scan the keyspace for documents written before them. A full `rebuild_hot` clears it.
BACKFILL_MARKER = "mp:meta:hot-index-backfill"


def index_name(tenant_hex: str, algorithm: str, base: str = INDEX_BASE) -> str:
    """One index per tenant and vector algorithm; switching algorithms drops the other (docs stay).

    The name carries the tenant's hash tag: without its coordinator, RediSearch makes the index
    name a command's key, so a Redis Cluster keeps the index on the master of that name's slot,
    where it indexes that master's keys only; with the tag it is the master of the tenant's keys
    (docs/decisions/0052-hot-tier-on-redis-cluster.md)."""
    return f"{base}:{algorithm.lower()}:{{{tenant_hex}}}"


def untagged_index_name(tenant_hex: str, algorithm: str, base: str = INDEX_BASE) -> str:
    """The name a tenant's index had before it carried the hash tag (dropped when found; its
    documents stay and the tagged index takes them in)."""
    return f"{base}:{algorithm.lower()}:{tenant_hex}"


#: Tag fields whose values callers name. RediSearch lowercases tag values and splits them at a
#: separator, so "ALICE" would match "alice" and a tag "red,blue" would match "red". Their values
#: are stored and queried `exact`: no letter case, no separator, no character a query must escape.
EXACT_FIELDS = ("user_id", "agent_id", "session_id", "kind", "tags")


def exact(value: str) -> str:
    """A caller's tag value as the index holds it: "x" and its UTF-8 bytes in hex."""
    return "x" + value.encode().hex()


DOC_TURN = "turn"
DOC_EPISODE = "episode"


def turn_key(tenant_hex: str, turn_id: int) -> str:
    return f"{tenant_tag(tenant_hex)}:turn:{turn_id}"


def episode_key(tenant_hex: str, episode_id: int) -> str:
    return f"{tenant_tag(tenant_hex)}:ep:{episode_id}"


def ballast_key(tenant_hex: str, number: int) -> str:
    """One of the ballast documents of the tenant's index (``bm25_probe.BALLAST``)."""
    return f"{tenant_tag(tenant_hex)}:ballast:{number}"


def tenant_pattern(tenant_hex: str) -> str:
    return f"{tenant_tag(tenant_hex)}:*"


#: Vectors per block of a tenant's FLAT index. RediSearch allocates a whole block with the first
#: vector: at its default of 1,024, a tenant with a single hot turn held 1.9 MB of Redis, so 1,000
#: tenants filled a 1 GB Redis with empty blocks; at 128, 0.33 MB, and a KNN over 20,000 documents
#: answers as fast (docs/decisions/0058-a-thousand-tenants-in-one-redis.md).
VECTOR_BLOCK = 128


def hot_schema(tenant_hex: str, dim: int, algorithm: str = "FLAT") -> dict:
    """A tenant's hot index: its turn documents and one document per hot episode, told apart by
    ``doctype``. It covers the tenant's keys only (its key prefix): its KNN compares the tenant's
    vectors, not the platform's, and its BM25 statistics (document frequencies, lengths) are the
    tenant's own, so no other tenant's text moves its ranking.

    FLAT by default: exact KNN, and a restart reloads in seconds where HNSW rebuilds for minutes
    while Redis refuses queries (docs/decisions/0002-hot-index-per-tenant.md).
    """
    vector_attrs: dict = {
        "dims": dim,
        "distance_metric": "cosine",
        "algorithm": algorithm.lower(),
        "datatype": "float32",
    }
    if algorithm.upper() == "HNSW":
        vector_attrs.update({"m": 16, "ef_construction": 200})
    else:
        vector_attrs["block_size"] = VECTOR_BLOCK
    return {
        "index": {
            "name": index_name(tenant_hex, algorithm),
            "prefix": f"{tenant_tag(tenant_hex)}:",
            "key_separator": ":",
            "storage_type": "hash",
        },
        "fields": [
            {"name": "doctype", "type": "tag"},
            {"name": "tenant", "type": "tag"},
            {"name": "user_id", "type": "tag"},
            {"name": "agent_id", "type": "tag"},
            {"name": "session_id", "type": "tag"},
            {"name": "kind", "type": "tag"},
            {"name": "layer", "type": "tag"},
            {"name": "state", "type": "tag"},
            {"name": "episode", "type": "tag"},
            {"name": "role", "type": "tag"},
            {"name": "tags", "type": "tag", "attrs": {"separator": ","}},
            {"name": "anchor", "type": "tag"},
            {"name": "text", "type": "text"},
            {"name": "occurred_at", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "embedding", "type": "vector", "attrs": vector_attrs},
        ],
    }
