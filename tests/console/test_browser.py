"""The operator console in a real headless Chromium (Debian's, driven by Playwright), each page
asserted for what an operator must see there: the tenants' home with numbers from the first
minute, a dashboard's charts, the review queue, an episode's page and its buttons, the policy's
live preview, the search playground, API keys. Screenshots go to ``var/screenshots/`` (kept as the
tests' artefacts)."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from lifecycle.models import Candidate, JournalEntry, policy_row
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
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#content-main")


def shot(page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def said(page) -> str:
    """The page's text, where the console's messages are."""
    return page.inner_text("body")


def cell(page, tenant: str, column: str) -> str:
    return page.inner_text(f'#tenants tr[data-tenant="{tenant}"] td[data-col="{column}"]')


def fits(page) -> bool:
    """Nothing runs off the right edge of the window, nor scrolls sideways inside it (a list's table
    in its frame)."""
    return page.evaluate(
        """document.documentElement.scrollWidth <= window.innerWidth &&
        [...document.querySelectorAll("#result_list, .mp-table")].every(
            (table) => table.parentElement.scrollWidth <= table.parentElement.clientWidth + 1)"""
    )


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
    beta = Caller("beta", embedder="provided")  # created a minute ago: no snapshot yet
    for vector in unit_vectors(3, seed=9):
        assert beta.post("/api/v1/search", {"vector": vector.tolist()}).status_code == 200
    page = browser_page

    log_in(page, live_server, "op")
    assert "Memory platform" in page.title()
    assert page.locator("#tenants tbody tr.tenant-row").count() == 2
    assert page.inner_text('#tenants tr[data-tenant="acme"] [data-layer="hot"]') == "6"
    # numbers from the first minute: searches since start, a real p95 (not a bucket's bound)
    assert cell(page, "beta", "searches").split()[0] == "3" and "since start" in cell(
        page, "beta", "searches"
    )
    p95 = cell(page, "beta", "p95")
    assert p95 not in ("—", "", "no searches") and p95.endswith("(3)")  # and the searches it rests on
    assert float(p95.split()[0]) not in (2.5, 5.0, 10.0, 25.0, 50.0, 100.0)
    assert cell(page, "acme", "searches").split()[0] == "12"
    assert "ok" in cell(page, "beta", "health")
    assert fits(page)
    # django-q and groups are not in an operator's way; "View site" goes to the API's docs
    sidebar = page.inner_text("#nav-sidebar-apps")
    assert "Review queue" in sidebar and "Search playground" in sidebar and "Groups" not in sidebar
    assert page.locator('a[href="/"]').count() == 0
    shot(page, "console-home")

    # sortable: hot episodes, most first, puts acme above beta; the other way round, below
    page.click('#tenants th[data-key="hot"] a')
    page.click('#tenants th[data-key="hot"] a')
    assert page.locator("#tenants tbody tr.tenant-row").first.get_attribute("data-tenant") == "acme"
    page.click('#tenants th[data-key="hot"] a')
    assert page.locator("#tenants tbody tr.tenant-row").first.get_attribute("data-tenant") == "beta"

    # a tenant in its first minutes: its charts start at its creation
    page.click('#tenants a:text-is("beta")')
    page.wait_for_selector(".dashboard-tenant")
    assert page.inner_text("#figure-searches .value") == "3"
    assert page.locator('svg[aria-label="Search latency"] [fill]').count() >= 1
    assert page.locator('svg[aria-label="Episodes by layer"] polyline').count() >= 1
    shot(page, "console-dashboard-new-tenant")

    page.goto(f"{live_server.url}/admin/tenants/{acme.pk}/dashboard/")
    assert "acme" in page.title()
    layers = page.locator('svg[aria-label="Episodes by layer"] polyline[data-series="hot"]')
    points = layers.get_attribute("points").split()
    assert len(points) == 7  # six snapshots and now
    heights = [float(p.split(",")[1]) for p in points]
    assert heights[0] > heights[-1]  # drawn rising: more hot episodes every hour (y grows downwards)
    latency = page.locator('svg[aria-label="Search latency"] polyline[data-series="p95"]')
    assert len(latency.get_attribute("points").split()) == 5  # the five hours between six snapshots
    assert fits(page)
    shot(page, "console-dashboard")

    page.click("input[value='Run a tick now']")
    page.wait_for_selector(".dashboard-tenant")
    assert "is queued" in said(page)
    from django_q.models import OrmQ

    assert OrmQ.objects.count() == 1  # on the queue for the worker, not run on the request thread
    assert acme.tick_runs.count() == 0


def test_review_queue_approve_and_reject_then_roll_back_from_the_journal(browser_page, live_server):
    get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)
    acme = aged_tenant("acme", hours=3)
    merged, survivor, doomed = acme.episodes.order_by("pk")[:3]
    merge = Candidate.objects.create(
        tenant=acme, kind="merge", episode=merged, other=survivor, similarity=0.9312, score=0.2
    )
    delete = Candidate.objects.create(tenant=acme, kind="delete", episode=doomed, score=-1.2556074822028902)
    page = browser_page
    log_in(page, live_server, "op")

    # the queue: both memories' texts and whose they are, side by side, rounded figures
    page.click('#nav-sidebar-apps a:has-text("Review queue")')
    row = page.locator(f'.review-row[data-candidate="{merge.pk}"]')
    sides = row.locator(".mp-side")
    assert [sides.nth(n).get_attribute("data-episode") for n in range(2)] == [
        merged.public_id,
        survivor.public_id,
    ]
    assert "user" in sides.nth(0).inner_text() and sides.nth(0).locator(".memory-text").count() >= 1
    assert row.locator(".similarity").inner_text() == "0.93"
    assert page.locator(f'.review-row[data-candidate="{delete.pk}"] .score').inner_text() == "-1.26"
    assert fits(page)
    shot(page, "console-review-queue")

    row.locator("button.approve").click()
    page.wait_for_selector(".review-queue")
    assert f"Proposal {merge.pk} (merge, acme) approved" in said(page)
    assert page.locator(f'.review-row[data-candidate="{merge.pk}"]').count() == 0
    merged.refresh_from_db()
    assert merged.state == "forgotten"  # soft: forgotten, linked to the survivor, journaled
    page.locator(f'.review-row[data-candidate="{delete.pk}"] button.reject').click()
    page.wait_for_selector("#review-empty")
    delete.refresh_from_db()
    assert delete.status == "rejected" and delete.decided_by == "admin:op"

    # every proposal, decided ones included: a table that fits the window
    page.goto(f"{live_server.url}/admin/lifecycle/candidate/")
    assert "-1.26" in page.inner_text("#result_list") and "-1.2556" not in page.inner_text("#result_list")
    shot(page, "console-candidates")
    assert fits(page)

    # the journal: roll the merge back, through a page that says what will change
    entry = (
        JournalEntry.objects.across_tenants("test")
        .filter(tenant=acme, episode=merged, action="merge")
        .latest("pk")
    )
    page.goto(f"{live_server.url}/admin/lifecycle/journalentry/?tenant__id__exact={acme.pk}")
    assert merged.public_id in page.inner_text("#result_list")  # the memory, not a row id
    shot(page, "console-journal")
    assert fits(page)
    page.check(f'input[name="_selected_action"][value="{entry.pk}"]')
    page.select_option('select[name="action"]', "roll_back")
    page.click('button[name="index"]')
    page.wait_for_selector(".rollback-confirmation")
    plan = page.inner_text(f'.rollback-plan[data-entry="{entry.pk}"]')
    assert "merge" in plan and "state" in plan
    merged.refresh_from_db()
    assert merged.state == "forgotten"  # nothing happens before the confirmation
    shot(page, "console-rollback-confirmation")
    page.click("#confirm-rollback")
    page.wait_for_selector("#result_list")
    assert "rolled back" in said(page).lower()
    merged.refresh_from_db()
    assert merged.state != "forgotten"


def test_an_episode_page_is_read_only_with_its_buttons(browser_page, live_server):
    get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)
    acme = aged_tenant("acme", hours=2)
    episode = acme.episodes.order_by("pk").first()
    page = browser_page
    log_in(page, live_server, "op")

    page.goto(f"{live_server.url}/admin/episodes/episode/")
    headers = page.inner_text("#result_list thead")
    assert "User" in headers
    assert "u1" in page.inner_text("#result_list tbody")
    shot(page, "console-episodes")
    assert fits(page)

    page.click(f'#result_list a:has-text("{episode.public_id}")')
    page.wait_for_selector(".episode-actions")
    text = said(page)
    for internal in ("optimistic", "seed", "Add another", "Version", "Needs reindex", "Search text"):
        assert internal not in text, internal
    # the text can be corrected (journaled) in a folded group; nothing else is a form field
    assert page.locator('details:not([open]):has-text("Correct its text")').count() == 1
    assert page.locator('[name="layer"], [name="state"], [name="anchor"], [name="user_id"]').count() == 0
    assert page.locator(".episode-actions button[data-action]").all_inner_texts() == [
        "Pack to warm",
        "Pack to cold",
        "Pin",
        "Forget",
    ]
    shot(page, "console-episode")

    page.click('button[data-action="pin"]')
    page.wait_for_selector(".episode-actions")
    assert "Pinned 1 episode(s)" in said(page)
    page.click('button[data-action="pack_warm"]')
    page.wait_for_selector('button[data-action="unpack"]')
    episode.refresh_from_db()
    assert episode.anchor and episode.layer == "warm"
    page.click('button[data-action="unpack"]')
    page.wait_for_selector('button[data-action="pack_warm"]')
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.click('button[data-action="forget"]')  # asked first: dismissed, nothing happens
    page.wait_for_selector('button[data-action="forget"]')
    assert asked and asked[0].startswith(f"Forget {episode.public_id}?")
    episode.refresh_from_db()
    assert episode.state != "forgotten"
    page.once("dialog", lambda dialog: dialog.accept())
    page.click('button[data-action="forget"]')
    page.wait_for_selector('button[data-action="restore"]')
    episode.refresh_from_db()
    assert episode.state == "forgotten" and episode.layer == "hot"
    shot(page, "console-episode-forgotten")
    page.click('button[data-action="restore"]')
    page.wait_for_selector('button[data-action="forget"]')
    episode.refresh_from_db()
    assert episode.state != "forgotten"
    actions = list(
        JournalEntry.objects.across_tenants("test")
        .filter(tenant=acme, episode=episode, actor="admin:op")
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert len(actions) == 5, actions  # every button journaled


def test_the_policy_page_previews_live_as_values_change(browser_page, live_server):
    get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)
    acme = aged_tenant("acme")
    page = browser_page
    log_in(page, live_server, "op")
    page.goto(f"{live_server.url}/admin/tenants/{acme.pk}/dashboard/")
    page.click("a:text-is('Policy')")
    page.wait_for_selector("#live-preview")
    assert "acme's policy" in page.title()
    shot(page, "console-policy")
    assert page.locator("details:not([open])").count() >= 8  # advanced settings folded
    text = said(page)
    assert "Save and add another" not in text and "Rrf k" not in text and "Days in hot" in text
    assert page.locator('a[href$="/delete/"]').count() == 0
    # on load: what the saved policy does now (the episodes idle past 14 days would go warm)
    page.wait_for_selector("#live-preview #preview-moves")
    assert page.locator("#live-preview #preview-changes").count() == 0  # nothing changed yet

    page.fill("#id_hot_days", "2")  # typing is enough: no button
    page.wait_for_selector('#preview-changes tr[data-field="hot_days"]')
    assert page.inner_text('#preview-changes tr[data-field="hot_days"] td:nth-child(3)') == "2"
    assert int(page.inner_text('#preview-moves tr[data-move="hot_to_warm"] td.count')) == 6
    assert page.locator('ul.sample[data-kind="hot_to_warm"] li').count() == 5
    assert fits(page)
    shot(page, "console-policy-preview")

    page.fill("#id_cold_days", "400")
    page.fill("#id_hot_days", "300")
    page.wait_for_selector("#live-preview #nothing-moves")
    why = page.inner_text("#live-preview .why")
    assert "last used" in why and "300 days" in why
    shot(page, "console-policy-nothing-moves")
    page.wait_for_function("!document.querySelector('#live-preview.htmx-request')")
    page.goto("about:blank")  # no preview left running when the test's database is emptied
    assert set(acme.episodes.values_list("layer", flat=True)) == {"hot"}  # nothing moved
    assert policy_row(acme).hot_days == 14  # nothing saved


def test_the_search_playground_shows_hits_turns_and_explain(browser_page, live_server):
    get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)
    acme = aged_tenant("acme", hours=2)
    tenant_create(name="beta", embedder="provided")
    page = browser_page
    log_in(page, live_server, "op")
    page.click('#nav-sidebar-apps a:has-text("Search playground")')
    page.select_option("#id_tenant", "acme")
    page.fill("#id_query", "cabin near Lake Tahoe")
    page.click("#run-search")
    page.wait_for_selector("#playground-summary")
    hits = page.locator(".playground-hit")
    assert hits.count() >= 1
    first = hits.first
    assert first.get_attribute("data-episode") in set(acme.episodes.values_list("public_id", flat=True))
    assert "Lake Tahoe" in first.locator(".shown-turns").inner_text()
    assert "user u1" in first.inner_text()
    first.locator("details summary").click()
    explain = first.locator("table.explain").inner_text()  # the ranking's parts, in words
    assert "fused score (relevance)" in explain and "score" in explain and "{" not in explain
    assert fits(page)
    shot(page, "console-playground")
    # a trial records no access: the memories' scores stay as they were
    assert sum(acme.episodes.values_list("access_count", flat=True)) == 0
    # it is a search: the home counts it
    page.goto(f"{live_server.url}/admin/")
    assert cell(page, "acme", "searches").split()[0] == "5"  # four before, and this one


def test_create_a_key_shown_once_then_revoke_it(browser_page, live_server, client):
    get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)
    acme = tenant_create(name="acme", embedder="provided")
    page = browser_page
    log_in(page, live_server, "op")
    page.goto(f"{live_server.url}/admin/tenancy/apikey/add/")
    # scopes as boxes to tick (read and write by default), no "revoked" box on a new key
    boxes = page.locator('input[name="scopes"]')
    assert [boxes.nth(n).get_attribute("value") for n in range(boxes.count())] == ["read", "write", "admin"]
    assert page.is_checked('input[name="scopes"][value="write"]')
    assert page.locator("#id_revoked").count() == 0
    page.fill("#id_name", "ci pipeline")
    page.select_option("#id_tenant", str(acme.pk))
    page.uncheck('input[name="scopes"][value="write"]')
    shot(page, "console-key-add")
    page.click('[name="_save"]')
    secret = page.inner_text("code.secret")
    assert page.locator("button.copy-secret").count() == 1
    shot(page, "console-key-created")
    assert client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200
    assert acme.api_keys.get().scopes == ["read"]

    key = acme.api_keys.get()
    page.reload()
    assert secret not in page.content()  # shown once
    page.check(f'input[name="_selected_action"][value="{key.pk}"]')
    page.select_option('select[name="action"]', "revoke_keys")
    page.click('button[name="index"]')
    page.wait_for_selector("#result_list")
    assert "revoked 1 key(s)" in said(page).lower()
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
    sidebar = page.inner_text("#nav-sidebar-apps")
    assert "Operators" not in sidebar and "Users" not in sidebar and "All applications" not in said(page)
    shot(page, "console-operator-home")
    for path in (
        "episodes/episode/",
        "review/",
        "playground/",
        "lifecycle/candidate/",
        "lifecycle/journalentry/",
    ):
        page.goto(f"{live_server.url}/admin/{path}")
        assert "beta" not in page.content() and "acme" in page.content(), path
    assert page.goto(f"{live_server.url}/admin/tenants/{beta.pk}/dashboard/").status == 404
    assert page.goto(f"{live_server.url}/admin/django_q/schedule/").status in (403, 404)


def test_every_list_fits_the_window(browser_page, live_server):
    get_user_model().objects.create_superuser("op", "op@example.com", PASSWORD)
    acme = aged_tenant("acme", hours=2)
    from lifecycle.tasks import tick_tenant

    tick_tenant(str(acme.pk))  # a tick run with its counts
    page = browser_page
    log_in(page, live_server, "op")
    unfit = []
    for path in (
        "lifecycle/tickrun/",
        "lifecycle/memorypolicy/",
        "episodes/turn/",
        "episodes/link/",
        "tenancy/apikey/",
        "tenancy/tenant/",
        "tenancy/auditevent/",
    ):
        page.goto(f"{live_server.url}/admin/{path}")
        shot(page, "console-list-" + path.strip("/").replace("/", "-"))
        if not fits(page):
            unfit.append(path)
    assert not unfit
