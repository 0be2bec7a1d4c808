"""An audit record outlives its tenant: deleting a tenant leaves its records without one."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenancy", "0006_tenant_layers_version"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="tenant",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="audit_events",
                to="tenancy.tenant",
            ),
        ),
    ]
