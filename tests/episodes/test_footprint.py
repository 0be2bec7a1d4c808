"""What a tenant's memories weigh as stored (``episodes.footprint``, ``manage.py footprint``):
Redis bytes of its hot documents and index, Postgres bytes by layer, and no other tenant's."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from episodes.footprint import footprint
from episodes.stores.bm25_probe import BALLAST
from lifecycle.tick import tick_run

from ..conftest import Caller, unit_vectors
from .test_hot_store import ingest

pytestmark = [pytest.mark.django_db(transaction=True)]

#: A turn's own vector and its window's, each 384 float32s, are in its Postgres row; the Redis
#: document holds the vector it is searched by.
VECTOR = 384 * 4


def test_a_tenants_footprint_counts_its_own_documents_and_rows_by_layer(provided):
    ingest(provided, "s1", unit_vectors(6, seed=51))
    outsider = Caller("outsider-co", embedder="provided")
    ingest(outsider, "s1", unit_vectors(3, seed=52))

    mine, theirs = footprint(provided.tenant), footprint(outsider.tenant)
    assert set(mine.layers) == {"hot"} and mine.layers["hot"].episodes == 6 and mine.layers["hot"].turns == 6
    assert mine.layers["hot"].postgres_bytes_per_episode > 2 * VECTOR
    # A document per turn and per episode, each tenant's own.
    assert (mine.redis_keys, theirs.redis_keys) == (12 + BALLAST, 6 + BALLAST)  # and their ballast
    assert mine.redis_documents_bytes > 6 * VECTOR and mine.redis_index_bytes > 0
    assert mine.quota_bytes > 0 and mine.redis_over_quota > 1
    assert theirs.layers["hot"].episodes == 3

    # Another tenant's writes leave this one's figures as they were.
    ingest(outsider, "s2", unit_vectors(4, seed=53))
    again = footprint(provided.tenant)
    assert (again.redis_keys, again.redis_documents_bytes, again.layers["hot"].postgres_bytes) == (
        mine.redis_keys,
        mine.redis_documents_bytes,
        mine.layers["hot"].postgres_bytes,
    )

    # Packed into warm, its memories leave Redis and are counted in Postgres under warm.
    tick_run(tenant=provided.tenant, now=timezone.now() + timedelta(days=60))
    packed = footprint(provided.tenant)
    assert "hot" not in packed.layers and packed.layers["warm"].episodes == 6
    assert packed.redis_keys == BALLAST and packed.redis_bytes_per_hot_episode == 0
    assert footprint(outsider.tenant).redis_keys == 14 + BALLAST


def test_the_command_prints_each_tenant_and_refuses_an_unknown_one(provided):
    ingest(provided, "s1", unit_vectors(2, seed=54))
    out = io.StringIO()
    call_command("footprint", provided.tenant.name, "--json", stdout=out)
    (row,) = json.loads(out.getvalue())
    assert row["tenant"] == provided.tenant.name and row["layers"]["hot"]["episodes"] == 2
    assert row["redis_bytes"] == row["redis_documents_bytes"] + row["redis_index_bytes"]
    out = io.StringIO()
    call_command("footprint", provided.tenant.name, stdout=out)
    assert "a hot episode" in out.getvalue() and "Postgres B/episode" in out.getvalue()
    with pytest.raises(Exception, match="no tenant named"):
        call_command("footprint", "nobody-here")
