"""The console's own pages and buttons for an operator of tenant A, with B as the outsider: the
review queue, an episode's buttons, the policy's live preview and the search playground show and
act on A's rows only, through the services (journaled), and refuse B's by id."""

from __future__ import annotations

import pytest
from django.utils.html import escape

from episodes.models import Episode
from lifecycle.models import Candidate, JournalEntry, policy_row
from tests.console.test_operators import PASSWORD, operator_of, tenant_with_everything

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def a_and_b(client):
    a, b = tenant_with_everything("alpha-co"), tenant_with_everything("bravo-co")
    operator_of(a, "op-a")
    assert client.login(username="op-a", password=PASSWORD)
    return a, b


def candidate_of(tenant) -> Candidate:
    return Candidate.objects.across_tenants("test").get(tenant=tenant)


def test_the_review_queue_shows_and_decides_only_the_operators_tenants(client, a_and_b):
    a, b = a_and_b
    page = client.get("/admin/review/").content.decode()
    assert f'data-candidate="{candidate_of(a).pk}"' in page and a.name in page
    assert f'data-candidate="{candidate_of(b).pk}"' not in page and b.name not in page

    detail = client.get(f"/admin/lifecycle/candidate/{candidate_of(a).pk}/change/").content.decode()
    assert f"/admin/review/{candidate_of(a).pk}/approve/" in detail  # Approve / Reject on its page too
    assert client.post(f"/admin/review/{candidate_of(b).pk}/reject/").status_code == 404
    assert candidate_of(b).status == "proposed"
    response = client.post(f"/admin/review/{candidate_of(a).pk}/reject/")
    assert response.status_code == 302 and candidate_of(a).status == "rejected"
    entry = JournalEntry.objects.across_tenants("test").filter(tenant=a).latest("pk")
    assert entry.actor == "admin:op-a"  # journaled, as the actions of the candidate list are
    assert client.get(f"/admin/review/{candidate_of(a).pk}/approve/").status_code == 405  # POST only


def test_a_review_card_says_what_approving_would_do_and_shows_the_memory_once(client, a_and_b):
    a, _ = a_and_b
    candidate = candidate_of(a)
    page = client.get("/admin/review/").content.decode()
    # From the card's own row to the next card's.
    card = page[page.index(f'data-candidate="{candidate.pk}"') :].split('class="mp-card review-row"')[0]
    kind = "Delete" if candidate.kind == "delete" else "Merge"
    assert f"{kind} {candidate.public_id}" in card  # the id the API and the list use
    assert "Approving forgets this memory" in card or "Approving merges this memory away" in card
    assert "Deleted (forgotten" not in card  # nothing is deleted before the decision
    assert "delete_candidate" not in card  # states in words
    episode = candidate.episode
    shown = episode.summary or episode.headline or episode.turns.order_by("seq").first().text
    side = card.split('class="mp-side"')[1]  # the memory itself (a merge's survivor is the second)
    assert side.count(escape(" ".join(shown.split())[:80])) == 1


def test_a_staff_user_without_the_permission_to_decide_sees_no_queue(client, a_and_b):
    a, _ = a_and_b
    user = operator_of(a, "reader")
    user.user_permissions.set(user.user_permissions.filter(codename__startswith="view_"))
    assert client.login(username="reader", password=PASSWORD)
    assert client.get("/admin/review/").status_code == 403
    assert client.post(f"/admin/review/{candidate_of(a).pk}/approve/").status_code == 403
    assert candidate_of(a).status == "proposed"
    assert Episode.objects.across_tenants("test").filter(tenant=a, state="forgotten").count() == 0


def test_an_episodes_buttons_act_on_the_operators_tenants_only(client, a_and_b):
    a, b = a_and_b
    mine = Episode.objects.across_tenants("test").filter(tenant=a, anchor=False).first()
    theirs = Episode.objects.across_tenants("test").filter(tenant=b, anchor=False).first()
    assert client.post(f"/admin/episodes/episode/{theirs.pk}/act/forget/").status_code == 404
    assert client.post(f"/admin/episodes/episode/{theirs.pk}/act/pin/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.state != "forgotten" and not theirs.anchor

    page = client.get(f"/admin/episodes/episode/{mine.pk}/change/").content.decode()
    assert 'data-action="forget"' in page and 'name="layer"' not in page
    assert client.post(f"/admin/episodes/episode/{mine.pk}/act/nonsense/").status_code == 404
    assert client.post(f"/admin/episodes/episode/{mine.pk}/act/forget/").status_code == 302
    mine.refresh_from_db()
    assert mine.state == "forgotten"
    entry = JournalEntry.objects.across_tenants("test").filter(tenant=a, episode=mine).latest("pk")
    assert (entry.action, entry.actor) == ("forget", "admin:op-a")


def test_the_live_preview_answers_for_the_operators_tenants_only(client, a_and_b):
    a, b = a_and_b
    theirs = client.post(
        f"/admin/lifecycle/memorypolicy/{policy_row(b).pk}/preview/", {}, HTTP_HX_REQUEST="true"
    )
    assert theirs.status_code == 404
    mine = client.post(
        f"/admin/lifecycle/memorypolicy/{policy_row(a).pk}/preview/", {}, HTTP_HX_REQUEST="true"
    )
    assert mine.status_code == 200 and "nothing to preview" in mine.content.decode()  # an empty form


def test_the_playground_searches_only_as_the_operators_tenants(client, a_and_b):
    a, b = a_and_b
    page = client.get("/admin/playground/").content.decode()
    assert f'value="{a.name}"' in page and b.name not in page
    as_b = client.post("/admin/playground/", {"tenant": b.name, "query": "cabin", "limit": 5})
    body = as_b.content.decode()
    assert as_b.status_code == 200 and "playground-hit" not in body and "Select a valid choice" in body
    assert not [
        pid
        for pid in Episode.objects.across_tenants("test").filter(tenant=b).values_list("public_id", flat=True)
        if pid in body
    ]
    as_a = client.post(
        "/admin/playground/", {"tenant": a.name, "query": "cabin", "limit": 5}
    ).content.decode()
    assert "playground-summary" in as_a
