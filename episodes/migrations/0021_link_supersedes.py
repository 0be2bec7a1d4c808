"""The link kind ``supersedes``: from a newer memory to an older one of the same owner whose value it
replaces (docs/decisions/0044-updates-above-what-they-replace.md). Choices only: nothing changes in
the database."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0020_mentioned"),
    ]

    operations = [
        migrations.AlterField(
            model_name="link",
            name="kind",
            field=models.CharField(
                choices=[
                    ("continues", "Continues"),
                    ("related", "Related"),
                    ("references", "References"),
                    ("merged_into", "Merged Into"),
                    ("supersedes", "Supersedes"),
                ],
                default="related",
                max_length=12,
            ),
        ),
    ]
