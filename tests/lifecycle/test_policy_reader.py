"""The policy as the code reads it: one typed, immutable value from one statement, the row's columns."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from lifecycle.models import MemoryPolicy, policy_row, read_policy
from lifecycle.tenant_policy import Policy
from memory_platform.tenancy.services import tenant_create

pytestmark = pytest.mark.django_db

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_value_has_every_column_of_the_row_and_nothing_else():
    stored = {f.name for f in MemoryPolicy._meta.concrete_fields} - {"id", "tenant", "updated_at"}
    assert set(Policy.field_names()) == stored


def test_read_policy_is_the_rows_values_and_cannot_be_changed():
    tenant = tenant_create(name="reader")
    row = policy_row(tenant)
    row.hot_days, row.fsrs_parameters = 9, [*row.fsrs_parameters[:-1], 0.2]
    row.save()

    policy = read_policy(tenant)
    assert policy == row.values()
    assert (policy.hot_days, policy.fsrs_parameters[-1]) == (9, 0.2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.hot_days = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        policy.fsrs_parameters[0] = 1.0  # type: ignore[index]


def test_read_policy_creates_the_defaults_for_a_tenant_without_a_row():
    tenant = tenant_create(name="fresh")
    MemoryPolicy.objects.for_tenant(tenant).delete()
    assert read_policy(tenant) == MemoryPolicy().values()
    assert MemoryPolicy.objects.for_tenant(tenant).count() == 1


def test_each_tenant_reads_its_own_policy():
    ours, theirs = tenant_create(name="ours"), tenant_create(name="theirs")
    row = policy_row(theirs)
    row.hot_days = 3
    row.save()
    assert (read_policy(ours).hot_days, read_policy(theirs).hot_days) == (14, 3)


def test_code_acts_on_the_policy_through_the_value_only():
    """The row is read in the files that change or show it; every other module receives a
    ``Policy`` (no ``.policy`` of a tenant, no query of its own)."""
    allowed = {
        "lifecycle/policy.py",  # the row (its own checks read the stored row)
        "lifecycle/policy_rows.py",  # the reader and the row
        "lifecycle/services.py",  # policy_save locks the row it changes
        "lifecycle/signals.py",  # a new tenant's row
        "console/site.py",  # links the dashboard to the row's page
        "console/admin/policy.py",  # the row's form
        "console/admin/episodes.py",  # the page's rows come with their policy row
        "lifecycle/presets.py",  # writes a preset's values on the row
        "lifecycle/policy_json.py",  # the row as JSON
    }
    found = set()
    apps = ("episodes", "lifecycle", "retrieval", "rights", "console")
    for path in [path for app in apps for path in ROOT.glob(f"{app}/**/*.py")]:
        if "migrations" in path.parts:
            continue
        text = path.read_text()
        if "MemoryPolicy.objects" in text or "tenant.policy" in text:
            found.add(str(path.relative_to(ROOT)))
    assert found <= allowed, sorted(found - allowed)
