"""The hot tier's indexes in Redis: one per tenant, made on the tenant's first use in a process,
earlier versions' dropped, its ballast held where BM25 needs it (``bm25_probe``), its removed
documents collected. ``hot.HotStore`` is the store built on them."""

from __future__ import annotations

import functools
import logging
import time

import redis
from redis.cluster import RedisCluster
from redis.commands.search.index_definition import IndexDefinition, IndexType
from redisvl.schema import IndexSchema

from memory_platform.conf import memory_settings
from memory_platform.redis_client import Client, info_field, on_owner_of, servers

from . import bm25_probe, hot_replies, keys

logger = logging.getLogger(__name__)

# How long the first use of a tenant's index waits for RediSearch to index documents already
# there (an upgrade from the shared index, or documents written while the index was missing).
INITIAL_SCAN_WAIT = 30.0

# A tenant's slot holding more keys than this on a master (a tenant sharing the slot) is not read
# key by key to learn whether the tenant's documents are there: its new index scans them.
_SLOT_KEYS_LOOKED_AT = 1000


class HotIndexes:
    """Index management for ``hot.HotStore``: every method takes the tenant explicitly."""

    client: Client
    _ensured: set[str]
    _ballasted: set[str]
    _legacy_dropped: bool
    _idf_wraps: bool | None

    def index_name(self, tenant_hex: str) -> str:
        return keys.index_name(tenant_hex, str(memory_settings.HOT_INDEX_ALGORITHM))

    def ensure_index(self, tenant_hex: str) -> str:
        """The tenant's index name, the index created on the tenant's first use in this process.

        Each tenant has its own index over its own keys (see ``keys.hot_schema``). A new index
        skips RediSearch's initial scan of the whole keyspace (a cost per new tenant that grows
        with the platform), since documents are written after their index exists; except after
        an index over existing documents was dropped (an upgrade from the shared index or from
        an earlier version's, or a switch of algorithm: ``keys.BACKFILL_MARKER``). Then it
        indexes them in the background and the first use waits for that, up to
        INITIAL_SCAN_WAIT seconds. (An index an operator drops
        by hand comes back empty: `manage.py rebuild_hot` indexes the tenant again.) Where BM25
        wraps, the index holds its ballast too (``bm25_probe``)."""
        name = self.index_name(tenant_hex)
        if name not in self._ensured:
            self._create_index(tenant_hex, name)
            self._ensured.add(name)
        if tenant_hex not in self._ballasted:
            self._hold_ballast(tenant_hex)
        return name

    def _create_index(self, tenant_hex: str, name: str) -> None:
        """``ensure_index``'s work the first time: the tenant's index made unless it exists, its
        outdated and stale ones dropped."""
        algorithm = str(memory_settings.HOT_INDEX_ALGORITHM).upper()
        # Their documents hold values this version cannot filter: they go with them, and the
        # tenant is indexed again from Postgres (`rebuild_hot`, or the next tick's repair).
        outdated = [
            keys.untagged_index_name(tenant_hex, a, base)
            for base in keys.OUTDATED_BASES
            for a in keys.ALGORITHMS
        ]
        for dropped in self._drop_indexes(outdated, with_documents=True):
            logger.warning("dropped outdated hot index %s; run `manage.py rebuild_hot`", dropped)
        # Two indexes over the same keys would double memory and write cost: the other
        # algorithm's, and this one's under its name from before the hash tag.
        stale = [keys.index_name(tenant_hex, a) for a in keys.ALGORITHMS if a != algorithm]
        stale += [keys.untagged_index_name(tenant_hex, a) for a in keys.ALGORITHMS]
        # And this tenant's index of an earlier version over the same documents.
        stale += [
            keys.index_name(tenant_hex, a, base) for base in keys.REINDEXED_BASES for a in keys.ALGORITHMS
        ]
        if not self._legacy_dropped:
            stale += list(keys.LEGACY_INDEXES)
        for dropped in self._drop_indexes(stale):
            self.client.set(keys.BACKFILL_MARKER, dropped)
        self._legacy_dropped = True
        try:
            self.client.execute_command("FT.INFO", name, **on_owner_of(self.client, name))
        except redis.ResponseError:
            backfill = bool(self.client.exists(keys.BACKFILL_MARKER)) or self._holds_documents(tenant_hex)
            schema = IndexSchema.from_dict(
                keys.hot_schema(tenant_hex, int(memory_settings.EMBEDDING_DIM), algorithm)
            )
            search = self.client.ft(name)
            # Made on the master of the tenant's slot at once (redis-py would ask a random one).
            search.execute_command = functools.partial(  # type: ignore[method-assign]
                self.client.execute_command, **on_owner_of(self.client, name)
            )
            try:
                search.create_index(
                    fields=schema.redis_fields,
                    definition=IndexDefinition(
                        prefix=[schema.index.prefix], index_type=IndexType.HASH, language_field="language"
                    ),
                    skip_initial_scan=not backfill,
                )
            except redis.ResponseError as exc:  # created meanwhile by another process
                if "already exists" not in str(exc).lower():
                    raise
            if backfill:
                self._wait_for_initial_scan(name)

    def _hold_ballast(self, tenant_hex: str) -> None:
        """Where BM25 wraps (``idf_wraps``), the tenant's index holds its ballast
        (``bm25_probe.hold_ballast``), written after the index, which then takes it in. Looked for
        once per process; a failure (Redis full) is logged and tried again on next use."""
        try:
            if self.idf_wraps():
                bm25_probe.hold_ballast(self.client, tenant_hex)
        except redis.RedisError as exc:
            logger.warning("could not write the ballast of tenant %s's hot index: %s", tenant_hex, exc)
            return
        self._ballasted.add(tenant_hex)

    def _drop_indexes(self, names: list[str], *, with_documents: bool = False) -> list[str]:
        """Drop those of these indexes that exist (in one round trip); the names dropped."""
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.execute_command(
                "FT.DROPINDEX", name, *(["DD"] if with_documents else []), **on_owner_of(self.client, name)
            )
        replies = pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, redis.ResponseError) and "unknown index" not in str(reply).lower():
                raise reply
        return [name for name, reply in zip(names, replies, strict=True) if not isinstance(reply, Exception)]

    def _holds_documents(self, tenant_hex: str) -> bool:
        """Whether the master of the tenant's slot holds documents of the tenant that no index of
        it covers: on a cluster, after its slot moved to this master (resharding), whose index
        must then scan them; never on one server, where the index exists as long as its
        documents (``keys.BACKFILL_MARKER`` says when it did not)."""
        if not isinstance(self.client, RedisCluster):
            return False
        tag = keys.tenant_tag(tenant_hex)
        node = on_owner_of(self.client, tag)
        slot = self.client.keyslot(tag)
        held = int(self.client.execute_command("CLUSTER COUNTKEYSINSLOT", slot, **node))
        if not held:
            return False
        if held > _SLOT_KEYS_LOOKED_AT:  # another tenant's keys may hide the tenant's: scan
            return True
        found = self.client.execute_command("CLUSTER GETKEYSINSLOT", slot, held, **node)
        return any(hot_replies.text(key).startswith(tag) for key in found)

    def _wait_for_initial_scan(self, name: str) -> None:
        deadline = time.monotonic() + INITIAL_SCAN_WAIT
        while float(
            hot_replies.text(
                info_field(
                    self.client.execute_command("FT.INFO", name, **on_owner_of(self.client, name)),
                    "indexing",
                    0,
                )
            )
        ):
            if time.monotonic() > deadline:
                logger.warning("hot index %s is still indexing existing documents", name)
                return
            time.sleep(0.02)

    def outdated_indexes(self) -> list[str]:
        """Indexes of earlier versions still in Redis: ``keys.OUTDATED_BASES``, and
        ``keys.REINDEXED_BASES`` (a tenant's first use takes those in, but a rebuild at start
        leaves no new index scanning the keyspace after them: ``keys.BACKFILL_MARKER``)."""
        bases = (*keys.OUTDATED_BASES, *keys.REINDEXED_BASES)
        return [name for name in self.index_names() if name.startswith(bases)]

    def index_names(self) -> list[str]:
        """Every index in Redis: each master of a cluster lists its own."""
        return sorted(
            {
                hot_replies.text(name)
                for node in servers(self.client)
                for name in node.execute_command("FT._LIST")
            }
        )

    def drop_outdated(self) -> int:
        """Drop every index of an earlier version with its documents, a deleted tenant's too."""
        return len(self._drop_indexes(self.outdated_indexes(), with_documents=True))

    def backfill_done(self) -> None:
        """Every tenant's documents are indexed again (a full rebuild): new tenant indexes need
        not scan the keyspace any more."""
        self.client.delete(keys.BACKFILL_MARKER)

    def forget_index_state(self) -> None:
        """After a FLUSHALL or a data loss, check for the indexes again on next use."""
        self._ensured.clear()
        self._ballasted.clear()
        self._legacy_dropped = False

    def idf_wraps(self) -> bool:
        """Whether this server's BM25 goes wrong until a removed document is collected
        (``bm25_probe``), asked once per process."""
        if self._idf_wraps is None:
            self._idf_wraps = bm25_probe.idf_wraps(self.client)
        return self._idf_wraps

    def collect_garbage(self, tenant_hex: str, *, only_if_needed: bool = False) -> None:
        """Purge the tenant's removed documents from its index now. BM25 counts a removed
        document in its statistics until RediSearch's fork GC runs (every 30 s by default), so
        ranking right after many removals depends on when that was. ``only_if_needed``: only on
        a server whose BM25 goes wrong meanwhile (``idf_wraps``). Even asked, RediSearch collects
        only an index that lost its collector's threshold of documents since its last run (half
        the ballast on the embedded server: ``bm25_probe``), and otherwise answers at once without
        forking Redis, which stops every tenant's requests while it does. (The index is not
        created for this: without one there is nothing to collect, and Redis says so.)"""
        if only_if_needed and not self.idf_wraps():
            return
        name = self.index_name(tenant_hex)
        self.client.execute_command("FT.DEBUG", "GC_FORCEINVOKE", name, **on_owner_of(self.client, name))
