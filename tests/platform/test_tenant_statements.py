"""The run's statement check (tests/tenant_statements.py) reports a statement on a table
distributed by tenant that names no tenant, and the ORM's statements for one row name it
(docs/operations/scale-out.md). The application's raw statements (``memory_platform.db``) are
refused before they are sent unless they are limited to the tenant they are sent for."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memory_platform import db
from memory_platform.tenancy.statements import StatementWithoutTenant

pytestmark = pytest.mark.django_db

WITHOUT_TENANT = "SELECT count(*) FROM episodes_turn WHERE episode_id = %s"
WITH_TENANT = "SELECT count(*) FROM episodes_turn WHERE tenant_id = %s AND episode_id = %s"


@pytest.fixture
def recorder(request):
    return request.config.pluginmanager.get_plugin("tenant_statements")


def test_a_statement_without_its_tenant_is_reported(recorder, caller):
    with recorder.collecting() as found:
        with connection.cursor() as cursor:
            cursor.execute(WITHOUT_TENANT, [1])
            cursor.execute(WITH_TENANT, [caller.tenant.pk, 1])
        db.fetch(WITH_TENANT, [caller.tenant.pk, 2], tenant=caller.tenant)  # through the same wrappers
    assert [(u.sql, u.tables) for u in found] == [(WITHOUT_TENANT, ("episodes_turn",))]
    assert all(u.origin.startswith("tests/platform/test_tenant_statements.py:") for u in found)


@pytest.mark.parametrize(
    ("sql", "fine"),
    [
        ('SELECT "episodes_link"."id" FROM "episodes_link" WHERE "episodes_link"."src_id" IN (%s, %s)', ""),
        ('UPDATE "episodes_episode" SET "title" = %s WHERE "episodes_episode"."id" = %s', ""),
        # tenant_id compared with a column names no tenant (the statement may read every one)
        (
            'SELECT 1 FROM "tenancy_tenant" WHERE NOT EXISTS(SELECT 1 FROM "episodes_episode" U0 '
            'WHERE U0."tenant_id" = ("tenancy_tenant"."id"))',
            "",
        ),
        ('SELECT "episodes_turn"."id" FROM "episodes_turn" WHERE "episodes_turn"."tenant_id" = %s', "tenant"),
        ('DELETE FROM "lifecycle_candidate" WHERE "lifecycle_candidate"."tenant_id" IN (%s, %s)', "tenant"),
        ("SELECT id FROM episodes_episode WHERE tenant_id = ANY(%s) AND id = ANY(%s)", "tenant"),
        ('INSERT INTO "episodes_turn" ("tenant_id", "episode_id") VALUES (%s, %s)', "insert"),
        (
            'SELECT "tenancy_apikey"."id" FROM "tenancy_apikey" WHERE "tenancy_apikey"."prefix" = %s',
            "not distributed",
        ),
        ('SELECT "django_q_ormq"."id" FROM "django_q_ormq"', "not tenant-owned"),
        ('ALTER TABLE "episodes_link" ADD CONSTRAINT "x" UNIQUE ("tenant_id", "src_id")', "schema"),
    ],
)
def test_what_the_text_of_a_statement_says(recorder, sql, fine):
    assert recorder.checker.verdict(sql).fine == fine


def test_joins_by_a_key_alone_are_told_apart(recorder):
    verdict = recorder.checker.verdict
    by_key = (
        'SELECT 1 FROM "lifecycle_candidate" INNER JOIN "episodes_episode" T3 ON '
        '("lifecycle_candidate"."episode_id" = T3."id") WHERE "lifecycle_candidate"."tenant_id" = %s'
    )
    each_its_own = (
        "SELECT 1 FROM episodes_link l JOIN episodes_episode e ON e.id = l.dst_id "
        "WHERE l.tenant_id = %s AND e.tenant_id = %s"
    )
    assert verdict(by_key).joined_by_key
    assert not verdict(each_its_own).joined_by_key


def _statements(queries, table):
    return [q["sql"] for q in queries if f'"{table}"' in q["sql"]]


def test_the_orm_names_the_tenant_of_the_rows_it_reads_and_writes(recorder, caller):
    from episodes.models import Episode, Turn
    from lifecycle.models import JournalEntry

    caller.post("/api/v1/turns", {"session_id": "s", "turns": [{"role": "user", "text": "hello there"}]})
    episode = Episode.objects.for_tenant(caller.tenant).get()
    tenant = re.compile(r'"tenant_id" (=|IN) ')
    with recorder.collecting() as found, CaptureQueriesContext(connection) as queries:
        list(episode.turns.all())  # a related manager
        Turn.objects.filter(episode__in=[episode]).count()
        list(Episode.objects.for_tenant(caller.tenant).prefetch_related("turns"))
        turn = Turn.objects.for_tenant(caller.tenant).get()
        turn.refresh_from_db()
        assert turn.episode == episode  # a foreign key read through its descriptor
        episode.title = "renamed"
        episode.save(update_fields=["title"])
        entry = JournalEntry.objects.create(
            tenant=caller.tenant, episode=episode, action="test", created_at=timezone.now()
        )
        assert JournalEntry.objects.for_tenant(caller.tenant).get(pk=entry.pk).episode == episode
    assert found == []
    reads = _statements(queries, "episodes_turn") + _statements(queries, "episodes_episode")
    assert reads and all(tenant.search(sql) or sql.startswith("INSERT") for sql in reads), reads
    update = next(sql for sql in reads if sql.startswith('UPDATE "episodes_episode"'))
    assert '"episodes_episode"."tenant_id" = ' in update


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        (WITHOUT_TENANT, lambda own, other: [1]),
        (WITH_TENANT, lambda own, other: [other, 1]),  # another tenant's rows
        ("SELECT id FROM episodes_episode WHERE tenant_id = ANY(%s)", lambda own, other: [[own, other]]),
        ("SELECT id FROM episodes_episode WHERE tenant_id IN (%s, %s)", lambda own, other: [own, other]),
        ("SELECT id FROM episodes_episode WHERE tenant_id = 'x' AND id = %s", lambda own, other: [1]),
        # the tenant compared, but with a column: every tenant's rows
        (
            "SELECT t.id FROM episodes_turn t, episodes_episode e WHERE t.tenant_id = e.tenant_id",
            lambda o, x: [],
        ),
    ],
)
def test_a_raw_statement_not_limited_to_its_tenant_is_refused_before_it_is_sent(
    recorder, caller, outsider, sql, params
):
    values = params(caller.tenant.pk, outsider.tenant.pk)
    with recorder.collecting() as found, CaptureQueriesContext(connection) as queries:
        with pytest.raises(StatementWithoutTenant):
            db.fetch(sql, values, tenant=caller.tenant)
        with pytest.raises(StatementWithoutTenant), db.cursor(caller.tenant) as cursor:
            cursor.execute(sql, values)
    assert found == [] and queries.captured_queries == []  # nothing reached the database


def test_a_raw_write_for_another_tenant_changes_nothing(caller, outsider):
    from episodes.models import Episode

    caller.post("/api/v1/turns", {"session_id": "s", "turns": [{"role": "user", "text": "hello there"}]})
    episode = Episode.objects.for_tenant(caller.tenant).get()
    with pytest.raises(StatementWithoutTenant), db.cursor(outsider.tenant) as cursor:
        cursor.execute(
            "UPDATE episodes_episode SET title = %s WHERE tenant_id = %s AND id = %s",
            ["taken", caller.tenant.pk, episode.pk],
        )
    episode.refresh_from_db()
    assert episode.title != "taken"


def test_a_statement_for_no_tenant_may_touch_no_tenants_table(caller):
    assert db.fetch_one("SELECT 1", tenant=None) == (1,)
    assert db.fetch_one("SELECT count(*) FROM tenancy_apikey WHERE prefix = %s", ["x"], tenant=None) == (0,)
    with pytest.raises(StatementWithoutTenant, match="for no tenant"):
        db.fetch(WITH_TENANT, [caller.tenant.pk, 1], tenant=None)


def test_a_raw_statement_limited_to_its_tenant_runs(caller):
    own = caller.tenant.pk
    assert db.fetch_one(WITH_TENANT, [own, 1], tenant=caller.tenant) == (0,)
    assert db.fetch_one(WITH_TENANT, [str(own), 1], tenant=own) == (0,)  # the id as text or a UUID
    both = "SELECT count(*) FROM episodes_episode WHERE tenant_id IN (%s, %s) AND id = ANY(%s)"
    assert db.fetch_one(both, [own, own, [1, 2]], tenant=caller.tenant) == (0,)
    with db.cursor(caller.tenant) as cursor:
        cursor.execute("SELECT count(*) FROM episodes_turn WHERE tenant_id = ANY(%s)", [[own]])
        assert cursor.fetchone() == (0,)
