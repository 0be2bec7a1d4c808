"""A GIN index on the episodes' entities, for search's one hop through shared entities
(``retrieval.hops``). Built CONCURRENTLY: writes go on while it builds."""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("episodes", "0017_search_vector_by_trigger")]

    operations = [
        AddIndexConcurrently(
            model_name="episode",
            index=GinIndex(fields=["entities"], name="episode_entities", fastupdate=False),
        ),
    ]
