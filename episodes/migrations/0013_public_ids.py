"""Public ids (episodes.public_ids) for episodes and turns, without a long lock on either table.

The column comes in nullable (no rewrite); existing rows get their ids in batches, each its own
transaction, with the time of the row's creation; the unique index is built concurrently; NOT NULL is
proven by a constraint validated without blocking writes, so setting it needs no scan. Rows written
meanwhile by a server still running the old code are caught by a second pass before the constraint.
"""

from django.db import migrations, models

import episodes.public_ids

BATCH = 10_000
TABLES = (("episodes_episode", "created_at", "episode"), ("episodes_turn", "ingested_at", "turn"))


def backfill(apps, schema_editor):
    connection = schema_editor.connection
    for table, made_at, _ in TABLES:
        done = 0
        while True:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT id, {made_at} FROM {table} WHERE public_id IS NULL LIMIT %s", [BATCH])
                rows = cursor.fetchall()
                if not rows:
                    break
                cursor.execute(
                    f"UPDATE {table} t SET public_id = v.public_id "
                    "FROM unnest(%s::bigint[], %s::text[]) AS v(id, public_id) WHERE t.id = v.id",
                    [[pk for pk, _ in rows], [episodes.public_ids.new(at) for _, at in rows]],
                )
            done += len(rows)
            if done % (10 * BATCH) == 0:
                print(f"  {table}: {done} rows given a public id", flush=True)


def not_null(table, name):
    check = f"{name}_public_id_not_null"
    return [
        f'ALTER TABLE {table} ADD CONSTRAINT {check} CHECK (public_id IS NOT NULL) NOT VALID',
        f"ALTER TABLE {table} VALIDATE CONSTRAINT {check}",
        f"ALTER TABLE {table} ALTER COLUMN public_id SET NOT NULL",
        f"ALTER TABLE {table} DROP CONSTRAINT {check}",
    ]


def field():
    return models.CharField(
        db_collation="C", default=episodes.public_ids.new, editable=False, max_length=26
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("episodes", "0012_hot_bytes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'ALTER TABLE {table} ADD COLUMN public_id varchar(26) COLLATE "C" NULL',
                    f"ALTER TABLE {table} DROP COLUMN public_id",
                )
                for table, _, _ in TABLES
            ],
            state_operations=[
                migrations.AddField(model_name="episode", name="public_id", field=field()),
                migrations.AddField(model_name="turn", name="public_id", field=field()),
            ],
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        *[
            migrations.RunSQL(
                f"CREATE UNIQUE INDEX CONCURRENTLY {name}_tenant_public_id ON {table} (tenant_id, public_id)",
                f"DROP INDEX IF EXISTS {name}_tenant_public_id",
            )
            for table, _, name in TABLES
        ],
        migrations.RunPython(backfill, migrations.RunPython.noop),
        *[migrations.RunSQL(not_null(table, name), migrations.RunSQL.noop) for table, _, name in TABLES],
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"ALTER TABLE {table} ADD CONSTRAINT {name}_tenant_public_id "
                    f"UNIQUE USING INDEX {name}_tenant_public_id",
                    f"ALTER TABLE {table} DROP CONSTRAINT {name}_tenant_public_id",
                )
                for table, _, name in TABLES
            ],
            state_operations=[
                migrations.AddConstraint(
                    model_name="episode",
                    constraint=models.UniqueConstraint(
                        fields=("tenant", "public_id"), name="episode_tenant_public_id"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="turn",
                    constraint=models.UniqueConstraint(fields=("tenant", "public_id"), name="turn_tenant_public_id"),
                ),
            ],
        ),
    ]
