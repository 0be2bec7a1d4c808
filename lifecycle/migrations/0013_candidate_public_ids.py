"""Public ids for merge and delete proposals (``episodes.public_ids``): the API names a proposal by
its public id, never by its integer key. Existing proposals get one made at their ``created_at``."""

from django.db import migrations, models

import episodes.public_ids


def fill(apps, schema_editor):
    Candidate = apps.get_model("lifecycle", "Candidate")
    for candidate in Candidate.objects.filter(public_id__isnull=True).only("pk", "created_at").iterator():
        candidate.public_id = episodes.public_ids.new(candidate.created_at)
        candidate.save(update_fields=["public_id"])


class Migration(migrations.Migration):
    dependencies = [
        ("lifecycle", "0012_help_texts"),
    ]

    operations = [
        migrations.AddField(
            model_name="candidate",
            name="public_id",
            field=models.CharField(max_length=26, null=True, editable=False, db_collation="C"),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="candidate",
            name="public_id",
            field=models.CharField(
                max_length=26, default=episodes.public_ids.new, editable=False, db_collation="C"
            ),
        ),
        migrations.AddConstraint(
            model_name="candidate",
            constraint=models.UniqueConstraint(fields=("tenant", "public_id"), name="candidate_tenant_public_id"),
        ),
    ]
