"""The hot index's vector blocks, and an index of the version before replaced: at a tenant's first
use (its documents kept and scanned in) or by `make run`'s start (docs/decisions/0058)."""

import io

import pytest

from episodes.scope import Scope
from episodes.stores import hot_replies, keys
from episodes.stores.hot import hot_store
from memory_platform.redis_client import info_field, on_owner_of

from ..conftest import unit_vectors
from .test_hot_store import index_names, ingest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_deployment")]


def vector_megabytes(store, tenant_hex):
    info = store.client.execute_command("FT.INFO", store.index_name(tenant_hex))
    return float(hot_replies.text(info_field(info, "vector_index_sz_mb")))


def test_a_tenants_first_hot_turn_takes_a_small_vector_block_not_redisearchs_default(provided):
    # RediSearch allocates a whole block of vectors with the first: at its default of 1,024
    # vectors that is 1.5 MB, and 1,000 small tenants filled a 1 GB Redis with empty blocks.
    tenant_hex = provided.tenant.id.hex
    ingest(provided, "s1", unit_vectors(1, seed=30))
    assert vector_megabytes(hot_store(), tenant_hex) < 0.5
    # The blocks grow as vectors come: 300 of them (three blocks) are all found.
    vectors = unit_vectors(300, seed=31)
    ids = ingest(provided, "s2", vectors)
    hits, _, _ = hot_store().search(tenant_hex, vector=vectors[250], text=None, scope=Scope(), k=5)
    assert hits[0].turn_id == ids[250]


def under_the_index_before(store, tenant_hex):
    """As an upgrade finds Redis: the tenant's documents under its index of the version before
    (named by the earlier base, with RediSearch's default vector blocks). Its name."""
    old = keys.index_name(tenant_hex, "FLAT", keys.REINDEXED_BASES[0])
    store.client.execute_command("FT.DROPINDEX", store.index_name(tenant_hex))
    store.client.execute_command(
        "FT.CREATE", old, "ON", "HASH", "PREFIX", "1", f"{keys.tenant_tag(tenant_hex)}:",
        "SCHEMA", "tenant", "TAG", **on_owner_of(store.client, old),
    )  # fmt: skip
    store.forget_index_state()
    return old


def _ingested_under_the_index_before(provided, count: int, seed: int):
    """``count`` turns ingested, then their tenant's index put back to the version before."""
    vectors = unit_vectors(count, seed=seed)
    ids = ingest(provided, "s1", vectors)
    tenant_hex = provided.tenant.id.hex
    store = hot_store()
    return vectors, ids, tenant_hex, store, under_the_index_before(store, tenant_hex)


def test_an_index_of_the_version_before_is_replaced_and_its_documents_found_without_a_rebuild(provided):
    vectors, ids, tenant_hex, store, old = _ingested_under_the_index_before(provided, 20, seed=32)

    hits, text_hits, _ = store.search(
        tenant_hex, vector=vectors[3], text="ledger apples", scope=Scope(), k=30
    )
    assert hits[0].turn_id == ids[3] and {h.turn_id for h in hits} == set(ids) and len(text_hits) == 20
    names = index_names(store)
    assert old not in names and store.index_name(tenant_hex) in names
    assert vector_megabytes(store, tenant_hex) < 0.5


def test_make_runs_start_rebuilds_an_index_of_the_version_before_and_leaves_no_scan_behind(provided):
    from django.core.management import call_command

    vectors, ids, tenant_hex, store, old = _ingested_under_the_index_before(provided, 8, seed=33)
    assert store.outdated_indexes() == [old]

    call_command("rebuild_hot", if_outdated=True, stdout=io.StringIO())
    assert store.outdated_indexes() == [] and not store.client.exists(keys.BACKFILL_MARKER)
    hits, _, _ = store.search(tenant_hex, vector=vectors[5], text=None, scope=Scope(), k=8)
    assert {h.turn_id for h in hits} == set(ids) and hits[0].turn_id == ids[5]
