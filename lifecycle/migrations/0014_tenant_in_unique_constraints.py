"""The tenant in the unique constraints of candidates and access windows, as Citus requires of a
table distributed by tenant (docs/decisions/0053-postgres-distributable-by-tenant.md). The same
rows are unique as before: an episode is its tenant's. An access window's episode becomes a
foreign key with a unique (tenant, episode) constraint in place of a one-to-one field (whose
unique constraint is on the episode alone); ``Episode.access_window`` is only ever a lookup."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    # Not on the latest episodes migration: a test that takes episodes back to an earlier one and
    # forward again would leave this one unapplied.
    dependencies = [
        ("episodes", "0002_initial"),
        ("lifecycle", "0013_candidate_public_ids"),
        ("tenancy", "0007_audit_outlives_tenant"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="candidate", name="candidate_one_open_proposal"),
        migrations.AddConstraint(
            model_name="candidate",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "proposed")),
                fields=("tenant", "kind", "episode", "other"),
                name="candidate_one_open_proposal",
                nulls_distinct=False,
            ),
        ),
        migrations.AlterField(
            model_name="accesswindow",
            name="episode",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="access_window",
                to="episodes.episode",
            ),
        ),
        migrations.AddConstraint(
            model_name="accesswindow",
            constraint=models.UniqueConstraint(
                fields=("tenant", "episode"), name="access_window_once_per_episode"
            ),
        ),
    ]
