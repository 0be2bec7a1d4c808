"""The episodes' ``search_vector`` in the ``russian`` configuration (``language.TEXT_CONFIG``, decision
0024), re-indexed without a long lock, and kept by a trigger from then on.

Changing a generated column's expression rewrites the table under an exclusive lock (19.6 s for
44,584 episodes here, writes waiting all along). Instead, every step holds its lock briefly:

1. a new column ``search_vector_next`` (no default: no rewrite) and a trigger that fills it on
   every insert and every write of ``search_text``, so nothing written from now on is missed;
2. the existing rows filled in batches of ``BATCH`` ids, each batch its own transaction (row locks
   only), then any row still empty;
3. its two GIN indexes built ``CONCURRENTLY`` (writes go on);
4. the swap, in one short transaction that gives up after ``lock_timeout`` and tries again: the
   old column and its indexes dropped (no rewrite), the new ones renamed, the final trigger.

From then on ``search_vector`` is a plain column that the trigger ``episode_search_vector`` computes
on every insert and every write of ``search_text`` (or of itself): what Django sends for it is
ignored. The reverse makes it a generated column again, in English as before migration 0015.
"""

import time

import django.contrib.postgres.search
from django.db import OperationalError, migrations, transaction

BATCH = 250
SWAP_ATTEMPTS = 30
LOCK_TIMEOUT = "2s"
VECTOR = "to_tsvector('russian'::regconfig, coalesce({row}.search_text, ''))"
PACKED = "WHERE layer IN ('warm', 'cold')"


def _trigger(column: str) -> str:
    function = f"episodes_episode_{column}"
    return f"""
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.{column} := {VECTOR.format(row="NEW")};
    RETURN NEW;
END $$;
CREATE TRIGGER episode_{column} BEFORE INSERT OR UPDATE OF search_text, {column} ON episodes_episode
    FOR EACH ROW EXECUTE FUNCTION {function}();
"""


PREPARE = "ALTER TABLE episodes_episode ADD COLUMN search_vector_next tsvector;" + _trigger("search_vector_next")
UNPREPARE = """
DROP TRIGGER IF EXISTS episode_search_vector_next ON episodes_episode;
DROP FUNCTION IF EXISTS episodes_episode_search_vector_next();
ALTER TABLE episodes_episode DROP COLUMN IF EXISTS search_vector_next;
"""


def fill(apps, schema_editor):
    """The rows that were there before the trigger, a batch of ids per transaction."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM episodes_episode")
        (last_id,) = cursor.fetchone()
        for start in range(0, last_id, BATCH):
            cursor.execute(
                f"UPDATE episodes_episode e SET search_vector_next = {VECTOR.format(row='e')} "
                "WHERE e.id > %s AND e.id <= %s",
                [start, start + BATCH],
            )
        while True:  # anything the ranges missed (none expected: the trigger has every new write)
            cursor.execute(
                f"UPDATE episodes_episode e SET search_vector_next = {VECTOR.format(row='e')} WHERE e.id IN "
                "(SELECT id FROM episodes_episode WHERE search_vector_next IS NULL LIMIT %s)",
                [BATCH],
            )
            if cursor.rowcount == 0:
                break


SWAP = (
    """
DROP TRIGGER episode_search_vector_next ON episodes_episode;
DROP FUNCTION episodes_episode_search_vector_next();
ALTER TABLE episodes_episode DROP COLUMN search_vector;
ALTER TABLE episodes_episode RENAME COLUMN search_vector_next TO search_vector;
ALTER INDEX episode_search_vector_next RENAME TO episode_search_vector;
ALTER INDEX episode_packed_search_vector_next RENAME TO episode_packed_search_vector;
"""
    + _trigger("search_vector")
)


def swap(apps, schema_editor):
    """One short transaction; when the table stays busy past the lock timeout, it waits and tries
    again rather than queueing every write behind it."""
    connection = schema_editor.connection
    for attempt in range(SWAP_ATTEMPTS):
        try:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                cursor.execute("LOCK TABLE episodes_episode IN ACCESS EXCLUSIVE MODE")
                cursor.execute(SWAP)
            return
        except OperationalError as exc:
            if "lock timeout" not in str(exc) or attempt == SWAP_ATTEMPTS - 1:
                raise
            time.sleep(1)


# Back to a generated column in English, as migration 0001 made it (a rewrite under lock, as
# any change of a generated expression is).
UNSWAP = """
DROP TRIGGER IF EXISTS episode_search_vector ON episodes_episode;
DROP FUNCTION IF EXISTS episodes_episode_search_vector();
ALTER TABLE episodes_episode DROP COLUMN search_vector;
ALTER TABLE episodes_episode ADD COLUMN search_vector tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, coalesce(search_text, ''))) STORED;
CREATE INDEX episode_search_vector ON episodes_episode USING gin (search_vector);
CREATE INDEX episode_packed_search_vector ON episodes_episode USING gin (search_vector)
    WITH (fastupdate = off) WHERE layer IN ('warm', 'cold');
ALTER TABLE episodes_episode ADD COLUMN search_vector_next tsvector;
CREATE INDEX episode_search_vector_next ON episodes_episode USING gin (search_vector_next);
CREATE INDEX episode_packed_search_vector_next ON episodes_episode USING gin (search_vector_next)
    WITH (fastupdate = off) WHERE layer IN ('warm', 'cold');
""" + _trigger("search_vector_next")


def unswap(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(UNSWAP)


class Migration(migrations.Migration):
    atomic = False  # each step commits on its own; CREATE INDEX CONCURRENTLY needs it

    dependencies = [
        ("episodes", "0016_forgotten_users"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(PREPARE, UNPREPARE),
                migrations.RunPython(fill, migrations.RunPython.noop),
                migrations.RunSQL(
                    "CREATE INDEX CONCURRENTLY episode_search_vector_next ON episodes_episode "
                    "USING gin (search_vector_next)",
                    "DROP INDEX CONCURRENTLY IF EXISTS episode_search_vector_next",
                ),
                migrations.RunSQL(
                    "CREATE INDEX CONCURRENTLY episode_packed_search_vector_next ON episodes_episode "
                    f"USING gin (search_vector_next) WITH (fastupdate = off) {PACKED}",
                    "DROP INDEX CONCURRENTLY IF EXISTS episode_packed_search_vector_next",
                ),
                migrations.RunPython(swap, unswap),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="episode",
                    name="search_vector",
                    field=django.contrib.postgres.search.SearchVectorField(
                        editable=False,
                        null=True,
                        help_text="computed from search_text by the trigger episode_search_vector",
                    ),
                ),
            ],
        ),
    ]
