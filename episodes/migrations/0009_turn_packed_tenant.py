"""A tenant's packed turns, for the exact plan of warm/cold search and its size check."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("episodes", "0008_turn_packed"),
    ]

    operations = [
        migrations.RunSQL(
            "CREATE INDEX turn_packed_tenant ON episodes_turn (tenant_id, id) WHERE packed",
            "DROP INDEX IF EXISTS turn_packed_tenant",
        ),
    ]
