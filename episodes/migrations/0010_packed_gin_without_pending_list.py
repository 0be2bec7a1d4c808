"""The full-text indexes every warm/cold search reads keep no pending list (`fastupdate = off`).

With Postgres's default (`fastupdate = on`), new GIN entries wait in a pending list that every
search reads in full, until a vacuum, or an insert past `gin_pending_list_limit` (4 MB), merges
it. Packing turns (the tick) fills it. Measured at 100k episodes: 3,000 turns packed left 161
pending pages, and the two-word full-text pass went from 0.8 to 7.4 ms p50 (2.4 to 19.5 ms p95)
until the list was merged. Off, the tick's writes go into the index directly (slower writes, in
the background), and searches always read a merged index.

`episode_search_vector` (all layers) keeps its pending list: every ingest writes it, and only
degraded mode (Redis down) reads it.
"""

from django.contrib.postgres.indexes import GinIndex
from django.db import migrations, models

PACKED = models.Q(("layer__in", ["warm", "cold"]))
INDEXES = ("turn_packed_search_vector", "episode_packed_search_vector")


def _alter(value: str) -> str:
    # ALTER INDEX does not merge what is already pending; gin_clean_pending_list does.
    return "".join(
        f"ALTER INDEX {name} SET (fastupdate = {value}); SELECT gin_clean_pending_list('{name}'::regclass);"
        for name in INDEXES
    )


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0009_turn_packed_tenant"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # Altered in place: rebuilding the indexes would lock and rescan every packed row.
            database_operations=[migrations.RunSQL(_alter("off"), _alter("on"))],
            state_operations=[
                migrations.RemoveIndex(model_name="episode", name="episode_packed_search_vector"),
                migrations.AddIndex(
                    model_name="episode",
                    index=GinIndex(
                        condition=PACKED,
                        fastupdate=False,
                        fields=["search_vector"],
                        name="episode_packed_search_vector",
                    ),
                ),
            ],
        ),
    ]
