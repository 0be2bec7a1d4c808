"""Counting uses (``episodes.stores.rows.uses_add``) from many processes at once: every search
counts its hits, so two searches often count the same episodes in the same instant."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.utils import timezone

from episodes.models import Episode
from episodes.stores import rows
from tests.lifecycle.factories import memory

pytestmark = pytest.mark.django_db(transaction=True)

#: How each writer has Postgres plan the UPDATE: both walk the episodes and look each up in the
#: uses, one through an index (in id order), the other through the table as laid out (backwards,
#: below). Locking the rows as its plan met them, each would take its locks in the other's reverse
#: order: two writers deadlocked within a few rounds.
PLANS = (
    ("SET enable_hashjoin = off", "SET enable_mergejoin = off", "SET enable_seqscan = off"),
    (
        "SET enable_hashjoin = off",
        "SET enable_mergejoin = off",
        "SET enable_indexscan = off",
        "SET enable_bitmapscan = off",
    ),
)
ROUNDS = 40


def test_two_writers_counting_the_same_episodes_never_deadlock(provided):
    tenant = provided.tenant
    episodes = [memory(tenant, text=f"note {i} about the ledger", idle_days=1, seed=i) for i in range(60)]
    # The table laid out last id first: a plan that reads it in order meets the rows backwards.
    with connection.cursor() as cursor:
        cursor.execute("CREATE INDEX episodes_backwards ON episodes_episode (id DESC)")
        cursor.execute("CLUSTER episodes_episode USING episodes_backwards")
        cursor.execute("DROP INDEX episodes_backwards")
        cursor.execute("SELECT id FROM episodes_episode WHERE tenant_id = %s ORDER BY ctid", [tenant.pk])
        assert [row[0] for row in cursor.fetchall()] == episodes[::-1]
    uses = {(tenant.pk, pk): rows.Use(accesses=1, traversals=0, at=timezone.now()) for pk in episodes}
    before = counts(tenant, episodes)
    failures: list[BaseException] = []
    start = threading.Barrier(len(PLANS))

    def writer(settings: tuple[str, ...]) -> None:
        try:
            with connection.cursor() as cursor:
                for statement in settings:
                    cursor.execute(statement)
            start.wait()
            for _ in range(ROUNDS):
                assert rows.uses_add(uses) == len(episodes)
        except BaseException as exc:  # noqa: BLE001 - reported below, from the test's thread
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(plan,)) for plan in PLANS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    # Every use counted, none lost to a transaction given up.
    assert counts(tenant, episodes) == {pk: n + len(PLANS) * ROUNDS for pk, n in before.items()}


def counts(tenant, episodes: list[int]) -> dict[int, int]:
    return dict(Episode.objects.filter(tenant=tenant, pk__in=episodes).values_list("pk", "access_count"))
