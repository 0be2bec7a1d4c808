"""Every tenant-owned model refuses a query that names no tenant (memory_platform.tenancy.scoping)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from django.apps import apps
from django.db import models

from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.scoping import TenantScopedQuerySet, UnscopedQuery
from memory_platform.tenancy.services import tenant_create

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def tenant_owned() -> list[type[models.Model]]:
    owned = []
    for model in apps.get_models():
        field = next((f for f in model._meta.fields if f.name == "tenant"), None)
        if field is not None and field.related_model is Tenant:
            owned.append(model)
    return owned


def test_the_tenant_owned_models_are_the_ones_the_platform_knows():
    names = {m.__name__ for m in tenant_owned()}
    assert {
        "Episode",
        "Turn",
        "Link",
        "JournalEntry",
        "Candidate",
        "ApiKey",
        "AuditEvent",
        "MemoryPolicy",
    } <= names
    assert len(names) == 14, names


@pytest.mark.parametrize("model", tenant_owned(), ids=lambda m: m.__name__)
def test_an_unscoped_query_on_every_tenant_owned_model_is_refused(model):
    manager = model._default_manager
    assert isinstance(manager.all(), TenantScopedQuerySet)
    refused = [
        lambda: list(manager.all()),
        lambda: manager.filter(pk=1).first(),
        lambda: manager.get(pk=1),
        lambda: manager.count(),
        lambda: manager.filter(pk__in=[1, 2]).exists(),
        lambda: list(manager.values_list("pk", flat=True)),
        lambda: manager.filter(pk=1).update(pk=1),
        lambda: manager.filter(pk=1).delete(),
        lambda: list(manager.exclude(tenant_id=1)),  # leaving one tenant out is not naming one
        lambda: list(manager.filter(tenant__is_active=True)),  # nor is naming every active one
        lambda: list(manager.order_by("pk").iterator()),
    ]
    for query in refused:
        with pytest.raises(UnscopedQuery):
            query()


@pytest.mark.parametrize("model", tenant_owned(), ids=lambda m: m.__name__)
def test_a_scoped_query_runs_and_sees_only_its_tenant(model):
    mine, other = tenant_create(name="scoping-mine"), tenant_create(name="scoping-other")
    manager = model._default_manager
    for tenant in (mine, other):
        assert list(manager.for_tenant(tenant).values_list("tenant_id", flat=True).distinct()) in (
            [],
            [tenant.pk],
        )
        assert manager.filter(tenant=tenant).count() == manager.filter(tenant_id=tenant.pk).count()
    assert manager.none().count() == 0
    everyone = manager.across_tenants("test: every tenant's rows").count()
    assert everyone >= manager.for_tenant(mine).count() + manager.for_tenant(other).count()


def test_a_row_read_for_its_tenant_scopes_the_rows_below_it(caller):
    from episodes.models import Episode, Turn

    caller.post("/api/v1/turns", {"session_id": "s", "turns": [{"role": "user", "text": "hello there"}]})
    episode = Episode.objects.for_tenant(caller.tenant).get()
    assert [t.text for t in episode.turns.all()] == ["hello there"]  # the related manager
    assert Turn.objects.filter(episode=episode).count() == 1
    assert Turn.objects.filter(episode__in=[episode]).count() == 1
    with pytest.raises(UnscopedQuery):
        Turn.objects.filter(episode_id=episode.pk).count()  # a bare key names no tenant
    with pytest.raises(ValueError):
        Episode.objects.across_tenants(" ")


def test_querysets_combine_only_when_scoped_to_the_same_tenant(caller, outsider):
    """``for_tenant(a) | filter(pk=x)`` would read ``tenant_id = a OR id = x``: another tenant's row."""
    from episodes.models import Episode

    for who in (caller, outsider):
        who.post(
            "/api/v1/turns", {"session_id": "s", "turns": [{"role": "user", "text": f"{who.tenant.name}"}]}
        )
    (theirs,) = Episode.objects.for_tenant(outsider.tenant).values_list("pk", flat=True)
    (mine,) = Episode.objects.for_tenant(caller.tenant).values_list("pk", flat=True)
    ours = Episode.objects.for_tenant(caller.tenant)
    refused = {
        "or an unscoped one": lambda: ours | Episode.objects.filter(pk=theirs),
        "or another tenant's": lambda: ours | Episode.objects.for_tenant(outsider.tenant),
        "and": lambda: ours & Episode.objects.filter(pk=theirs),
        "xor": lambda: ours ^ Episode.objects.for_tenant(outsider.tenant),
        "union": lambda: ours.union(Episode.objects.filter(pk=theirs)),
        "union of another tenant's": lambda: ours.union(Episode.objects.filter(tenant_id=outsider.tenant.pk)),
        "intersection": lambda: ours.intersection(Episode.objects.filter(pk=theirs)),
        "difference": lambda: ours.difference(Episode.objects.across_tenants("test: every tenant")),
        "an unscoped one first": lambda: Episode.objects.filter(pk=theirs) | ours,
        "a tenant named by a subquery": lambda: (
            ours | Episode.objects.filter(tenant__in=type(caller.tenant).objects.filter(pk=caller.tenant.pk))
        ),
    }
    for name, combine in refused.items():
        with pytest.raises(UnscopedQuery, match="not scoped to the same tenant"):
            combine()
        assert name
    # The same tenant, however it was named, on both sides: the rows are that tenant's alone.
    same = ours.filter(pk=mine) | Episode.objects.filter(tenant_id=str(caller.tenant.pk), pk=theirs)
    assert list(same.values_list("pk", flat=True)) == [mine]
    assert list(ours.union(Episode.objects.filter(tenant=caller.tenant)).values_list("pk", flat=True)) == [
        mine
    ]
    assert list((Episode.objects.none() | ours).values_list("pk", flat=True)) == [mine]
    every = Episode.objects.across_tenants("test: one") | Episode.objects.across_tenants("test: two")
    assert {mine, theirs} <= set(every.values_list("pk", flat=True))


def test_the_places_that_cross_tenants_are_the_known_ones():
    found = subprocess.run(
        [
            "git",
            "grep",
            "-n",
            "across_tenants(",
            "--",
            "*.py",
            ":!tests/",
            ":!memory_platform/tenancy/scoping.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    files = sorted({line.split(":", 1)[0] for line in found})
    assert files == sorted(ALLOWED), found


#: The files that read or write more than one tenant's rows, and why (each call says it again).
ALLOWED = {
    "episodes/tasks.py": "repair: every tenant's episodes marked for the hot index",
    "lifecycle/stats.py": "snapshots: their retention across tenants",
    "memory_platform/admin_base.py": "the console of a superuser",
    "memory_platform/tenancy/admin.py": "the console: a superuser assigns operators to every tenant",
    "memory_platform/tenancy/models.py": "authentication: a key names its own tenant",
    "memory_platform/tenancy/management/commands/api_key.py": "an operator names a key by its prefix",
}
