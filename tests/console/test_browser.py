"""The operator console in a real headless Chromium (Debian's, driven by Playwright): log in, the
tenants' home, a tenant's dashboard with its charts drawn, a tick queued from it. Screenshots go to
``var/screenshots/``."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from lifecycle.models import Candidate, JournalEntry
from lifecycle.stats import take_snapshots
from memory_platform.tenancy.services import tenant_create
from tests.conftest import Caller, unit_vectors
from tests.lifecycle.factories import conversation

pytestmark = pytest.mark.django_db(transaction=True)

SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"
PASSWORD = "pw-12345678"


def chromium_path() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail(
            f"no chromium at {path}: `make test` installs Debian's chromium (apt-get install chromium)"
        )
    return path


@pytest.fixture
def browser_page(live_server, monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
    # between pages are ordinary synchronous ones.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(15_000)
        yield page
        browser.close()


def log_in(page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")


def aged_tenant(name: str, hours: int = 6):
    """A tenant whose figures changed over the last ``hours``: one snapshot an hour, an episode
    more and two searches before each (older episodes dated weeks back)."""
    caller = Caller(name, embedder="provided")
    now = timezone.now()
    for hour in range(hours, 0, -1):
        conversation(caller.tenant, session=f"s{hour}", idle_days=hour * 5, now=now, seed=hour)
        for vector in unit_vectors(2, seed=hour):
            assert caller.post("/api/v1/search", {"vector": vector.tolist()}).status_code == 200
        take_snapshots(now - timedelta(hours=hour))
    return caller.tenant


def test_home_and_a_tenant_dashboard_with_its_charts(browser_page, live_server):
    get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)
    acme = aged_tenant("acme")
    tenant_create(name="beta", embedder="provided")
    page = browser_page

    log_in(page, live_server, "op")
    assert page.inner_text("#site-name") == "Memory platform"
    rows = page.locator("#tenants tbody tr.tenant-row")
    assert rows.count() == 2
    acme_row = page.locator('#tenants tr[data-tenant="acme"]')
    assert acme_row.locator("td").nth(0).inner_text() == "6"  # six hot episodes
    page.screenshot(path=str(SCREENSHOTS / "console-home.png"), full_page=True)

    # sortable: hot episodes, most first, puts acme above beta; the other way round, below
    page.click("#tenants th >> text=Hot")
    page.click("#tenants th >> text=Hot")
    assert page.locator("#tenants tbody tr.tenant-row").first.get_attribute("data-tenant") == "acme"
    page.click("#tenants th >> text=Hot")
    assert page.locator("#tenants tbody tr.tenant-row").first.get_attribute("data-tenant") == "beta"

    page.click('#tenants a:text-is("acme")')
    page.wait_for_selector(".dashboard-tenant")
    assert "acme" in page.title()
    charts = page.locator("svg.chart")
    assert charts.count() >= 1
    layers = page.locator('svg[aria-label="Episodes by layer"] polyline[data-series="hot"]')
    points = layers.get_attribute("points").split()
    assert len(points) == 7  # six snapshots and now
    heights = [float(p.split(",")[1]) for p in points]
    assert heights[0] > heights[-1]  # drawn rising: more hot episodes every hour (y grows downwards)
    latency = page.locator('svg[aria-label="Search latency (bucket bound)"] polyline[data-series="p95"]')
    assert len(latency.get_attribute("points").split()) == 5  # the five hours between six snapshots
    page.screenshot(path=str(SCREENSHOTS / "console-dashboard.png"), full_page=True)

    page.click("input[value='Run a tick now']")
    page.wait_for_selector(".messagelist")
    assert "is queued" in page.inner_text(".messagelist")
    from django_q.models import OrmQ

    assert OrmQ.objects.count() == 1  # on the queue for the worker, not run on the request thread
    assert acme.tick_runs.count() == 0
    page.screenshot(path=str(SCREENSHOTS / "console-tick-queued.png"), full_page=True)

    # the policy, titled by the tenant's name: preview a shorter hot period, nothing saved
    page.click("text=Policy")
    assert page.title().startswith("acme's policy")
    page.fill("#id_hot_days", "2")
    page.click("#preview-policy")
    page.wait_for_selector("#preview-moves")
    assert page.inner_text('#preview-changes td:text-is("hot_days") + td + td') == "2"
    moved = int(page.inner_text('#preview-moves tr[data-move="hot_to_warm"] td.count'))
    assert moved == 6  # every episode is idle longer than two days
    assert page.locator('ul.sample[data-kind="hot_to_warm"] li').count() == 5
    page.screenshot(path=str(SCREENSHOTS / "console-policy-preview.png"), full_page=True)
    assert set(acme.episodes.values_list("layer", flat=True)) == {"hot"}  # nothing moved
    assert acme.policy.hot_days == 14


def test_review_a_merge_candidate_and_roll_back_its_journal_entry(browser_page, live_server):
    get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)
    acme = aged_tenant("acme", hours=2)
    merged, survivor = acme.episodes.order_by("pk")[:2]
    candidate = Candidate.objects.create(
        tenant=acme, kind="merge", episode=merged, other=survivor, similarity=0.93, score=0.2
    )
    page = browser_page
    log_in(page, live_server, "op")

    # the review queue: both texts side by side with their similarity; approve it
    page.goto(f"{live_server.url}/admin/lifecycle/candidate/?status__exact=proposed")
    row = page.locator(f'tr:has(input[name="_selected_action"][value="{candidate.pk}"])')
    assert merged.public_id in row.locator("td.field-episode_text").inner_text()
    assert survivor.public_id in row.locator("td.field-other_text").inner_text()
    assert row.locator("td.field-similarity").inner_text() == "0.93"
    page.screenshot(path=str(SCREENSHOTS / "console-candidates.png"), full_page=True)
    row.locator('input[name="_selected_action"]').check()
    page.select_option('select[name="action"]', "approve")
    page.click('button[name="index"]')
    assert "approved 1 candidate(s)" in page.inner_text(".messagelist").lower()
    merged.refresh_from_db()
    assert merged.state == "forgotten"  # soft: forgotten, linked to the survivor, journaled

    # the journal: roll the merge back, through a page that says what will change
    entry = (
        JournalEntry.objects.across_tenants("test")
        .filter(tenant=acme, episode=merged, action="merge")
        .latest("pk")
    )
    page.goto(f"{live_server.url}/admin/lifecycle/journalentry/?tenant__id__exact={acme.pk}")
    page.check(f'input[name="_selected_action"][value="{entry.pk}"]')
    page.select_option('select[name="action"]', "roll_back")
    page.click('button[name="index"]')
    page.wait_for_selector(".rollback-confirmation")
    plan = page.inner_text(f'.rollback-plan[data-entry="{entry.pk}"]')
    assert "merge" in plan and "state" in plan
    merged.refresh_from_db()
    assert merged.state == "forgotten"  # nothing happens before the confirmation
    page.screenshot(path=str(SCREENSHOTS / "console-rollback-confirmation.png"), full_page=True)
    page.click("#confirm-rollback")
    assert "rolled back" in page.inner_text(".messagelist").lower()
    merged.refresh_from_db()
    assert merged.state != "forgotten"


def test_create_a_key_shown_once_then_revoke_it(browser_page, live_server, client):
    get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)
    acme = tenant_create(name="acme", embedder="provided")
    page = browser_page
    log_in(page, live_server, "op")
    page.goto(f"{live_server.url}/admin/tenancy/apikey/add/")
    page.fill("#id_name", "ci pipeline")
    page.select_option("#id_tenant", str(acme.pk))
    page.fill("#id_scopes", "read")
    page.click('input[name="_save"]')
    secret = page.inner_text(".messagelist code.secret")
    assert page.locator(".messagelist button.copy-secret").count() == 1
    page.screenshot(path=str(SCREENSHOTS / "console-key-created.png"), full_page=True)
    assert client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200

    key = acme.api_keys.get()
    page.reload()
    assert secret not in page.content()  # shown once
    page.check(f'input[name="_selected_action"][value="{key.pk}"]')
    page.select_option('select[name="action"]', "revoke_keys")
    page.click('button[name="index"]')
    assert "revoked 1 key(s)" in page.inner_text(".messagelist").lower()
    assert client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 401


def test_an_operator_of_one_tenant_sees_only_it(browser_page, live_server):
    from django.contrib.auth.models import Permission

    from memory_platform.tenancy.models import TenantOperator

    acme, beta = aged_tenant("acme", hours=2), aged_tenant("beta", hours=2)
    user = get_user_model().objects.create_user("op-acme", password=PASSWORD, is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label__in=("episodes", "lifecycle", "tenancy"))
    )
    TenantOperator.objects.create(user=user, tenant=acme)
    page = browser_page
    log_in(page, live_server, "op-acme")
    assert [row.get_attribute("data-tenant") for row in page.locator("#tenants tr.tenant-row").all()] == [
        "acme"
    ]
    page.screenshot(path=str(SCREENSHOTS / "console-operator-home.png"), full_page=True)
    page.goto(f"{live_server.url}/admin/episodes/episode/")
    assert "beta" not in page.content() and "acme" in page.content()
    assert page.goto(f"{live_server.url}/admin/tenants/{beta.pk}/dashboard/").status == 404
