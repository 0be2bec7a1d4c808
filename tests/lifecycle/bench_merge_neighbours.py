"""What the tick's nearest-neighbour search for merges costs
(docs/decisions/0040-merges-within-one-scope.md): 2,000 of 11,000 packed memories searched, the
tenant's memories spread over 1,000 users (or, with MERGE_BENCH_ONE_OWNER=1, all of one owner).
Not part of the suite (its name is not test_*); run it by name:
``.venv/bin/pytest tests/lifecycle/bench_merge_neighbours.py -q -s``."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import numpy as np
import pytest
from django.db import connection, transaction

from episodes.models import Episode
from episodes.stores import merges
from tests.conftest import Caller

from .factories import NOW

pytestmark = pytest.mark.django_db(transaction=True)

USERS, SENTENCES, SCANNED = 1000, 10, 2000
#: The statement before merges stayed within one owner: the tenant and the kind only.
TENANT_AND_KIND = (
    "SELECT a.id, b.id FROM episodes_episode a "
    "CROSS JOIN LATERAL (SELECT c.id, c.embedding FROM episodes_episode c "
    "  WHERE c.tenant_id = a.tenant_id AND c.kind = a.kind AND c.id <> a.id "
    "  AND c.layer IN ('warm', 'cold') AND c.state <> 'forgotten' AND c.embedding IS NOT NULL "
    "  ORDER BY c.embedding <=> a.embedding LIMIT 3) b "
    "WHERE a.tenant_id = %s AND a.id = ANY(%s) AND 1 - (a.embedding <=> b.embedding) >= 0.92"
)


def timed(label: str, run) -> None:
    started = time.perf_counter()
    found = run()
    print(f"{label:<40} {time.perf_counter() - started:7.2f} s {len(found):6d} pairs")


def before(tenant, ids):
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cursor.execute(TENANT_AND_KIND, [tenant.pk, ids])
        return cursor.fetchall()


def without_owner_index(tenant, ids):
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("DROP INDEX episode_packed_owner")
        found = merges.merge_neighbours(
            tenant, ids, neighbours=3, threshold=0.92, packed=USERS * (SENTENCES + 1)
        )
        transaction.set_rollback(True)  # the index comes back
    return found


def test_merge_neighbours_cost():
    one_owner = os.environ.get("MERGE_BENCH_ONE_OWNER") == "1"
    tenant = Caller("bench", embedder="provided").tenant
    rng = np.random.default_rng(0)
    sentences = rng.normal(size=(SENTENCES, 384))
    at = NOW - timedelta(days=40)
    episodes = []
    # Every user wrote the same ten sentences, and the first of them twice: one pair per user.
    for user in range(USERS):
        for sentence in [*range(SENTENCES), 0]:
            vector = sentences[sentence] + 0.05 * rng.normal(size=384)
            episodes.append(
                Episode(
                    tenant=tenant,
                    user_id="" if one_owner else f"u{user}",
                    kind="fact",
                    layer="warm",
                    embedding=(vector / np.linalg.norm(vector)).astype("float32"),
                    first_occurred_at=at,
                    last_occurred_at=at,
                    last_accessed_at=at,
                )
            )
    Episode.objects.bulk_create(episodes, batch_size=1000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE episodes_episode")
    ids = list(
        Episode.objects.across_tenants("test")
        .filter(tenant=tenant)
        .order_by("pk")
        .values_list("pk", flat=True)[:SCANNED]
    )
    print(f"\n{len(episodes)} packed memories, {'one owner' if one_owner else f'{USERS} users'}")
    timed("tenant and kind (before)", lambda: before(tenant, ids))
    timed("owner, without episode_packed_owner", lambda: without_owner_index(tenant, ids))
    timed(
        "owner (merges.merge_neighbours)",
        lambda: merges.merge_neighbours(
            tenant, ids, neighbours=3, threshold=0.92, packed=USERS * (SENTENCES + 1)
        ),
    )
