"""Operators scoped to tenants (docs/decisions/0028): a staff user given tenant A sees and changes only A in
the console (lists, pages by id, filters, dashboards, previews, keys); a superuser sees all."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.utils import timezone

from episodes.models import Episode
from lifecycle.models import Candidate, JournalEntry, TickRun, policy_row
from lifecycle.services import episode_pin
from memory_platform.tenancy.models import TenantOperator
from tests.conftest import Caller
from tests.lifecycle.factories import NOW, conversation

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "pw-12345678"
APPS = ("episodes", "lifecycle", "tenancy")


def tenant_with_everything(name: str):
    caller = Caller(name, embedder="provided")
    tenant = caller.tenant
    first = conversation(tenant, session="s1", idle_days=3, seed=1)
    second = conversation(tenant, session="s2", idle_days=200, seed=2)
    episode_pin(tenant=tenant, episode_id=first, anchor=True, now=NOW, actor="test")  # a journal entry
    TickRun.objects.create(tenant=tenant, now_used=NOW, counts={"scored": 2})
    Candidate.objects.create(
        tenant=tenant, kind="merge", episode_id=second, other_id=first, similarity=0.9, score=0.1
    )
    return tenant


def operator_of(tenant, username: str):
    user = get_user_model().objects.create_user(username, password=PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=APPS))
    TenantOperator.objects.create(user=user, tenant=tenant)
    return user


def test_an_operator_of_a_sees_nothing_of_b(client):
    a, b = tenant_with_everything("alpha-co"), tenant_with_everything("bravo-co")
    operator_of(a, "op-a")
    assert client.login(username="op-a", password=PASSWORD)
    secrets_of_b = [
        b.name,
        str(b.pk),
        *Episode.objects.across_tenants("test").filter(tenant=b).values_list("public_id", flat=True),
    ]
    pages = [
        "/admin/",
        f"/admin/tenants/{a.pk}/dashboard/",
        "/admin/episodes/episode/",
        "/admin/episodes/turn/",
        "/admin/episodes/link/",
        "/admin/lifecycle/memorypolicy/",
        "/admin/lifecycle/tickrun/",
        "/admin/lifecycle/journalentry/",
        "/admin/lifecycle/candidate/",
        "/admin/tenancy/apikey/",
        "/admin/tenancy/tenant/",
        "/admin/tenancy/apikey/add/",
        f"/admin/lifecycle/memorypolicy/{policy_row(a).pk}/change/",
        "/admin/autocomplete/?app_label=lifecycle&model_name=memorypolicy&field_name=tenant",
    ]
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, (page, response.status_code)
        body = response.content.decode()
        if page not in {"/admin/episodes/link/", "/admin/tenancy/apikey/add/"} and "autocomplete" not in page:
            assert a.name in body, page  # A's own rows are there
        leaked = [secret for secret in secrets_of_b if secret in body]
        assert not leaked, (page, leaked)

    # B by id: not there
    b_episode = Episode.objects.across_tenants("test").filter(tenant=b).first()
    for page in (
        f"/admin/tenants/{b.pk}/dashboard/",
        f"/admin/tenancy/tenant/{b.pk}/change/",
        f"/admin/episodes/episode/{b_episode.pk}/change/",
        f"/admin/lifecycle/memorypolicy/{policy_row(b).pk}/change/",
        f"/admin/lifecycle/journalentry/{JournalEntry.objects.across_tenants('test').filter(tenant=b).first().pk}/change/",
    ):
        response = client.get(page, follow=True)
        assert response.status_code == 404 or b.name not in response.content.decode(), page
    assert client.get(f"/admin/tenants/{b.pk}/dashboard/").status_code == 404
    assert client.post(f"/admin/tenants/{b.pk}/tick/").status_code == 404
    assert client.post(f"/admin/lifecycle/memorypolicy/{policy_row(b).pk}/preview/", {}).status_code == 404

    # actions on B's rows, named in a POST body, touch nothing
    b_candidate = Candidate.objects.across_tenants("test").get(tenant=b)
    client.post("/admin/lifecycle/candidate/", {"action": "approve", "_selected_action": [b_candidate.pk]})
    assert Candidate.objects.across_tenants("test").get(pk=b_candidate.pk).status == "proposed"
    b_entry = JournalEntry.objects.across_tenants("test").filter(tenant=b).first()
    client.post(
        "/admin/lifecycle/journalentry/",
        {"action": "roll_back", "_selected_action": [b_entry.pk], "confirmed": "yes"},
    )
    assert JournalEntry.objects.across_tenants("test").get(pk=b_entry.pk).rolled_back_at is None
    # and a key cannot be made for B
    added = client.post(
        "/admin/tenancy/apikey/add/",
        {"name": "sneaky", "tenant": b.pk, "scopes": "read", "expiry_date_0": "", "expiry_date_1": ""},
    )
    assert added.status_code == 200 and not b.api_keys.filter(name="sneaky").exists()


def test_a_staff_user_without_tenants_sees_none_and_a_superuser_all(admin_client):
    a, b = tenant_with_everything("alpha-co"), tenant_with_everything("bravo-co")
    everything = admin_client.get("/admin/").content.decode()
    assert a.name in everything and b.name in everything
    assert admin_client.get("/admin/tenancy/tenantoperator/").status_code == 200

    user = get_user_model().objects.create_user("nobody", password=PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=APPS))
    admin_client.logout()
    assert admin_client.login(username="nobody", password=PASSWORD)
    home = admin_client.get("/admin/").content.decode()
    assert a.name not in home and b.name not in home
    assert admin_client.get("/admin/tenancy/tenantoperator/").status_code == 403  # only superusers assign


def test_the_task_queues_pages_are_a_superusers_alone(client, admin_client):
    """django-q's tasks, schedules and failures carry every tenant's arguments and results, with no
    tenant to scope them by: an operator, even one given django-q's permissions, sees none of them."""
    from django_q.models import Failure, Schedule, Success

    from lifecycle.tasks import schedule_ticks

    a, b = tenant_with_everything("alpha-co"), tenant_with_everything("bravo-co")
    schedule_ticks()  # a tick schedule per tenant, B's named by its id
    started = timezone.now()
    for model, success in ((Success, True), (Failure, False)):
        model.objects.create(
            id=uuid.uuid4().hex,
            name=f"tick-{b.pk}",
            func="lifecycle.tasks.tick_tenant",
            args=(str(b.pk),),
            started=started,
            stopped=started,
            success=success,
            result={"tenant": str(b.pk)},
        )
    pages = [
        "/admin/django_q/",
        "/admin/django_q/schedule/",
        "/admin/django_q/success/",
        "/admin/django_q/failure/",
        f"/admin/django_q/schedule/{Schedule.objects.get(name=f'lifecycle.tick:{b.pk}').pk}/change/",
        f"/admin/django_q/success/{Success.objects.get().pk}/change/",
        "/admin/django_q/schedule/add/",
    ]
    for page in pages:
        assert admin_client.get(page).status_code == 200, page
    assert "django_q" in admin_client.get("/admin/").content.decode()

    user = operator_of(a, "op-a")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="django_q"))
    assert client.login(username="op-a", password=PASSWORD)
    for page in pages:
        response = client.get(page)
        assert response.status_code in (403, 404), (page, response.status_code)
        assert str(b.pk) not in response.content.decode()
    home = client.get("/admin/").content.decode()
    assert "django_q" not in home and a.name in home and b.name not in home
    schedules = Schedule.objects.count()
    client.post("/admin/django_q/schedule/add/", {"name": "sneaky", "func": "os.getcwd"})
    assert Schedule.objects.count() == schedules
