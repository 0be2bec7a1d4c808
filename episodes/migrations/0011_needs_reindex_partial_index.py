# The index repair drains the episodes marked needs_reindex, and search checks a tenant for them:
# a partial index on the few marked rows, built without locking writes.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("episodes", "0010_packed_gin_without_pending_list"),
        ("tenancy", "0001_initial"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="episode",
            index=models.Index(
                condition=models.Q(("needs_reindex", True)), fields=["tenant"], name="episode_needs_reindex"
            ),
        ),
    ]
