"""The console's pages through Django's test client: the policy preview and the record of every
saved change, and statements per page that do not grow with tenants or episodes."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from console.admin import MemoryPolicyForm
from lifecycle.models import JournalEntry, PolicyChange, TickRun, policy_row
from lifecycle.services import episode_pin
from memory_platform.tenancy.services import api_key_create, tenant_create
from tests.lifecycle.factories import NOW, conversation

pytestmark = pytest.mark.django_db(transaction=True)


def form_data(policy, **changed) -> dict:
    """The policy's change form as a browser would post it, with ``changed`` values."""
    form = MemoryPolicyForm(instance=policy)
    data = {}
    for name in form.fields:
        value = form[name].value()  # as the widget shows it
        if value is None or value is False:
            continue
        data[name] = value
    data.update(changed)
    return data


@pytest.fixture
def aged():
    tenant = tenant_create(name="acme", embedder="provided")
    for n, days in enumerate([1, 5, 30, 60, 200]):
        conversation(tenant, session=f"s{n}", idle_days=days, seed=n)
    return tenant


def test_a_saved_change_is_recorded_with_who_and_old_and_new_values(admin_client, aged):
    policy = policy_row(aged)
    url = f"/admin/lifecycle/memorypolicy/{policy.pk}/change/"
    response = admin_client.post(url, form_data(policy, hot_days=7, llm_api_key="sk-secret"))
    assert response.status_code == 302, response.content.decode()[:2000]
    change = PolicyChange.objects.across_tenants("test").get(tenant=aged)
    assert change.actor == "admin:op"
    assert change.changes["hot_days"] == [14, 7]
    assert change.changes["llm_api_key"] == ["(empty)", "(set)"]  # never the secret itself
    page = admin_client.get(url).content.decode()
    assert "acme&#x27;s policy" in page  # titled by the tenant's name, not its id
    assert (
        'id="policy-changes"' in page
        and "admin:op" in page
        and "sk-secret" not in page.split("policy-changes")[1]
    )
    assert "<td>Days in hot</td><td>14</td><td>7</td>" in page.split("policy-changes")[1]  # by its label


def test_a_journal_entrys_page_says_what_a_rollback_restores(admin_client, aged):
    episode = aged.episodes.order_by("pk").first()
    episode_pin(tenant=aged, episode_id=episode.pk, anchor=True, now=NOW, actor="test")
    entry = JournalEntry.objects.across_tenants("test").filter(tenant=aged, action="anchor").latest("pk")
    page = admin_client.get(f"/admin/lifecycle/journalentry/{entry.pk}/change/").content.decode()
    assert "what a rollback restores" in page and episode.public_id in page
    assert "demote_warm" not in page and "enough of the old state" not in page


def test_the_preview_shows_the_moves_of_the_entered_values_and_saves_nothing(admin_client, aged):
    policy = policy_row(aged)
    before = (
        TickRun.objects.across_tenants("test").count(),
        JournalEntry.objects.across_tenants("test").count(),
        policy.hot_days,
    )
    response = admin_client.post(
        f"/admin/lifecycle/memorypolicy/{policy.pk}/preview/", form_data(policy, hot_days=3)
    )
    page = response.content.decode()
    assert response.status_code == 200, page[:2000]
    assert 'data-move="hot_to_warm"' in page and 'data-kind="hot_to_warm"' in page
    assert '<tr data-field="hot_days"><td>Days in hot</td><td>14</td><td>3</td></tr>' in page
    assert (
        TickRun.objects.across_tenants("test").count(),
        JournalEntry.objects.across_tenants("test").count(),
        policy_row(aged).hot_days,
    ) == before

    panel = admin_client.post(
        f"/admin/lifecycle/memorypolicy/{policy.pk}/preview/",
        form_data(policy, hot_days=3000, cold_days=4000, theta_delete=-100, theta_active=-99),
        HTTP_HX_REQUEST="true",
    ).content.decode()
    assert "<html" not in panel and 'id="nothing-moves"' in panel, panel[panel.find("preview-moves") :][:600]
    assert "The longest unused hot memory was last used" in panel
    assert "go warm after 3000 days unused" in panel

    invalid = admin_client.post(
        f"/admin/lifecycle/memorypolicy/{policy.pk}/preview/", form_data(policy, hot_days=-1)
    )
    assert "nothing to preview" in invalid.content.decode()


PAGES = {
    "home": "/admin/",
    "dashboard": "/admin/tenants/{tenant}/dashboard/",
    "episodes": "/admin/episodes/episode/",
    "candidates": "/admin/lifecycle/candidate/",
    "journal": "/admin/lifecycle/journalentry/",
    "tick runs": "/admin/lifecycle/tickrun/",
    "keys": "/admin/tenancy/apikey/",
    "policies": "/admin/lifecycle/memorypolicy/",
}


@pytest.mark.parametrize("page", list(PAGES))
def test_statements_per_page_do_not_grow_with_tenants_or_episodes(admin_client, page):
    def statements(tenants: int, episodes: int) -> int:
        made = [tenant_create(name=f"{page}-{tenants}-{n}", embedder="provided") for n in range(tenants)]
        for tenant in made:
            api_key_create(tenant=tenant, name="k", actor="service", now=NOW)
            for n in range(episodes):
                episode = conversation(tenant, session=f"s{n}", idle_days=n + 1, seed=n)
                episode_pin(tenant=tenant, episode_id=episode, anchor=True, now=NOW, actor="test")
            TickRun.objects.create(tenant=tenant, now_used=NOW, counts={"scored": episodes})
        url = PAGES[page].format(tenant=made[0].pk)
        admin_client.get(url)  # sessions, content types: cached after the first request
        with CaptureQueriesContext(connection) as queries:
            assert admin_client.get(url).status_code == 200
        return len(queries)

    assert statements(1, 1) == statements(20, 3)


def test_the_policy_page_is_presets_and_a_few_settings_with_the_rest_folded(admin_client, aged):
    policy = policy_row(aged)
    page = admin_client.get(f"/admin/lifecycle/memorypolicy/{policy.pk}/change/").content.decode()
    assert "Days in hot" in page and "Rank smoothing" in page and "Rrf k" not in page
    assert "Llm base url" not in page and "seed" not in page and "DESIGN" not in page
    assert page.count("<details") >= 8  # the advanced groups, folded
    assert "Save and add another" not in page and "/delete/" not in page
    assert 'id="live-preview"' in page and "hx-post" in page
    assert admin_client.get("/admin/lifecycle/memorypolicy/add/").status_code == 403
    assert admin_client.post(f"/admin/lifecycle/memorypolicy/{policy.pk}/delete/").status_code == 403


def test_an_episodes_outgoing_links_name_and_link_where_they_go(admin_client, aged):
    from episodes.models import Link

    source, target = aged.episodes.order_by("pk")[:2]
    Link.objects.create(tenant=aged, src=source, dst=target, kind="related")
    page = admin_client.get(f"/admin/episodes/episode/{source.pk}/change/").content.decode()
    links = page.split("through the API)")[1]
    assert 'class="column-linked_to' in links and 'data-label="to"' in links  # headed "to"
    assert f'href="/admin/episodes/episode/{target.pk}/change/"' in links
    assert "Dst" not in page


def test_why_nothing_moves_says_the_hot_bytes_in_units(aged):
    from console.admin.policy import why_nothing_moves
    from lifecycle.models import read_policy

    reasons = why_nothing_moves(aged, read_policy(aged), NOW)
    said = [r for r in reasons if r.startswith("Hot holds")]
    assert said and said[0].endswith("of the 64.0\xa0MB it may."), reasons


def test_every_page_names_its_icon_and_the_icon_is_served(admin_client):
    page = admin_client.get("/admin/").content.decode()
    assert 'href="/static/console/favicon.svg"' in page and 'rel="icon"' in page
    icon = admin_client.get("/static/console/favicon.svg")
    assert icon.status_code == 200 and b"<svg" in b"".join(icon.streaming_content)
