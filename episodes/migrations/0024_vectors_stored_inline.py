"""Vectors kept in their rows (docs/decisions/0056-tick-at-scale.md).

pgvector gives its type EXTERNAL storage: once a row passes about 2 kB, a vector of 384 floats
(1.5 kB) is moved out of line, into the table's TOAST relation, and every read of it is one more
index lookup there. An episode's row with its vector is about 2.3 kB and a turn's with its two
about 3.5 kB, so most were out of line: the tick's merge scan read a tenant's thousand episode
vectors in 6 ms, against 1 ms for the same rows without them, and a search's packed turns read
their window vectors one lookup each. MAIN keeps a value in its row while the row fits in a page
(the text columns, EXTENDED, are compressed or moved out first). Rows written before keep their
layout until they are written again.
"""

from django.db import migrations

COLUMNS = (
    ("episodes_episode", "embedding"),
    ("episodes_turn", "embedding"),
    ("episodes_turn", "context_embedding"),
)


def _storage(kind: str) -> str:
    return "; ".join(
        f"ALTER TABLE {table} ALTER COLUMN {column} SET STORAGE {kind}" for table, column in COLUMNS
    )


class Migration(migrations.Migration):
    dependencies = [("episodes", "0023_tenant_in_constraints_and_triggers")]

    operations = [migrations.RunSQL(_storage("MAIN"), reverse_sql=_storage("EXTERNAL"))]
