"""The episodes' full-text column (migration 0017): re-indexed in Russian's configuration without a
long lock, while writes go on, and kept by its trigger from then on whatever Django sends."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.management import call_command
from django.db import connection, connections

from episodes.models import Episode
from tests.conftest import Caller

pytestmark = pytest.mark.django_db(transaction=True)

RUSSIAN = "Мы решили перенести релиз из-за бага в платёжном модуле"


def vectors_right() -> tuple[int, int]:
    """(rows, rows whose search_vector is not what Russian's configuration makes of search_text)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE search_vector IS DISTINCT FROM "
            "to_tsvector('russian', coalesce(search_text, ''))) FROM episodes_episode"
        )
        return cursor.fetchone()


def generated() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attgenerated FROM pg_attribute WHERE attrelid = 'episodes_episode'::regclass "
            "AND attname = 'search_vector'"
        )
        return cursor.fetchone()[0] != ""


def test_the_trigger_keeps_the_column_whatever_django_sends():
    caller = Caller("fts-trigger")
    episode_id = caller.post("/api/v1/memories", {"text": RUSSIAN}).json()["id"]
    assert not generated() and vectors_right()[1] == 0
    episode = Episode.objects.across_tenants("test").get(public_id=episode_id)
    assert "платёжн" in str(episode.search_vector) or "платежн" in str(episode.search_vector)
    episode.search_vector = "'nonsense':1"  # a stale or wrong value in memory is never written
    episode.save()
    Episode.objects.across_tenants("test").filter(pk=episode.pk).update(search_text="我们 决定 数据库")
    assert vectors_right()[1] == 0
    episode.refresh_from_db()
    assert "数据库" in str(episode.search_vector)


def test_the_migration_reindexes_while_writes_go_on():
    caller = Caller("fts-migration")
    for i in range(30):
        caller.post("/api/v1/memories", {"text": f"{RUSSIAN} ({i})"})
    call_command("migrate", "episodes", "0016", verbosity=0)  # back to the English generated column
    assert generated() and vectors_right()[1] == 30  # "платёжном" is not stemmed in English

    stop, waits, errors = threading.Event(), [], []

    def write() -> None:
        """Another client writing episodes all along, refusing to wait more than a second."""
        with connections["default"].cursor() as cursor:
            cursor.execute("SET lock_timeout = '1s'")
            while not stop.is_set():
                started = time.monotonic()
                try:
                    cursor.execute(
                        "UPDATE episodes_episode SET access_count = access_count + 1, "
                        "search_text = search_text || ' ещё' WHERE id = (SELECT min(id) FROM episodes_episode)"
                    )
                except Exception as exc:
                    errors.append(exc)
                waits.append(time.monotonic() - started)
        connections["default"].close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        call_command("migrate", "episodes", verbosity=0)
    finally:
        stop.set()
        writer.join()
    assert errors == [] and len(waits) > 10
    assert not generated() and vectors_right() == (30, 0)  # the writer's rows too
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = 'episodes_episode'::regclass AND c.relname LIKE '%%search_vector%%' ORDER BY 1"
        )
        assert cursor.fetchall() == [("episode_packed_search_vector", True), ("episode_search_vector", True)]
        # An inflected query finds every row through the index, as warm and cold search reads it.
        cursor.execute(
            "SELECT count(*) FROM episodes_episode WHERE search_vector @@ plainto_tsquery('russian', %s)",
            ["платёжный модуль"],
        )
        assert cursor.fetchone()[0] == 30
