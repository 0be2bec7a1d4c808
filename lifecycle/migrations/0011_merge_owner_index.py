"""The index the tick's merge proposals read their nearest neighbours through: packed episodes by
tenant, owner (``episodes.stores.merges.MERGE_SCOPE``) and kind. With it a person's neighbours are
ranked among that person's few packed episodes; without it Postgres read the tenant's whole
table for each episode (docs/decisions/0040-merges-within-one-scope.md). A large owner (every
memory of a tenant under one user) still goes through the HNSW index, as the planner chooses.

It is lifecycle's, the only reader, and kept out of ``Episode.Meta`` as the packed turns' HNSW
index is (episodes migration 0008). Built CONCURRENTLY: writes go on while it builds."""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("episodes", "0002_initial"),
        ("lifecycle", "0010_merges_within_one_scope"),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS episode_packed_owner ON episodes_episode "
            "(tenant_id, user_id, agent_id, kind) WHERE layer IN ('warm', 'cold')",
            "DROP INDEX CONCURRENTLY IF EXISTS episode_packed_owner",
        ),
    ]
