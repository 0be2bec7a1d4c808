"""What `/context` writes once memory has aged: the same evidence search finds, whatever its layer
(retrieval.evidence, retrieval.context), within the budget."""

from datetime import UTC, datetime, timedelta

import pytest

from episodes.models import Episode, Layer
from lifecycle.tick import tick_run
from memory_platform.tenancy.models import Tenant
from retrieval.evidence import estimate_tokens

from .test_search import turns

pytestmark = pytest.mark.django_db(transaction=True)

AUGUST = datetime(2026, 8, 4, 18, 0, tzinfo=UTC)
SESSIONS = [
    (
        "dinner-plans",
        AUGUST,
        [
            "Maya is coming over next week, remember she has a severe shellfish allergy.",
            "Got it: no shrimp, prawns, mussels or anything from the sea for Maya.",
            "She is fine with fish though, just not shellfish.",
            "Understood, fish yes, shellfish never.",
        ],
    ),
    (
        "flat-hunt",
        AUGUST + timedelta(days=9),
        [
            "Maya and I are looking at flats in Lisbon, our budget is up to 1,600 EUR a month.",
            "Got it: up to 1,600 EUR. Any area in mind?",
            "We are leaning towards Alfama, close to the river.",
            "Alfama noted. I will keep an eye on listings there.",
        ],
    ),
    (
        "the-lease",
        AUGUST + timedelta(days=40),
        [
            "We decided on Arroios in the end, not Alfama.",
            "Congratulations! Did you sign already?",
            "Yes, we signed the lease at Rua Morais Soares, the rent is 1,750 EUR a month.",
            "Noted: you now rent in Arroios, 1,750 EUR a month.",
        ],
    ),
    (
        "garden",
        AUGUST + timedelta(days=50),
        [
            "The tomatoes on the balcony finally turned red.",
            "Lovely. Are you going to make a sauce?",
            "Maybe a salad first, with basil from the window box.",
            "Reminder set to water the basil every morning.",
        ],
    ),
]


@pytest.fixture
def maya(caller):
    for session, at, texts in SESSIONS:
        turns(caller, session, texts, user="maya", at=at)
    tenant = Tenant.objects.get(pk=caller.tenant.pk)
    # Aged as a scheduler would: a month and then half a year without a use.
    for days in (30, 200):
        tick_run(tenant=tenant, now=datetime.now(UTC) + timedelta(days=days))
    layers = set(Episode.objects.across_tenants("test").filter(tenant=tenant).values_list("layer", flat=True))
    assert Layer.HOT not in layers and Layer.COLD in layers, layers
    return caller


def context_text(caller, query, max_tokens=500, **extra):
    response = caller.post(
        "/api/v1/context", {"query": query, "user_id": "maya", "max_tokens": max_tokens, **extra}
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["tokens"] <= max_tokens and estimate_tokens(body["text"]) <= max_tokens
    return body["text"]


def test_aged_context_holds_the_allergy_and_the_rent_within_500_tokens(maya):
    dinner = context_text(maya, "Suggest a restaurant for dinner with Maya on Friday")
    assert "shellfish allergy" in dinner
    rent = context_text(maya, "Where did Maya end up renting, and how much is the rent?")
    assert "1,750 EUR a month" in rent


def test_context_lists_memories_in_time_order_and_names_them_on_request(maya):
    text = context_text(maya, "Maya flat rent Alfama Arroios lease", max_tokens=1000)
    assert text.index("1,600") < text.index("1,750")
    named = context_text(maya, "Maya flat rent Alfama Arroios lease", max_tokens=1000, ids=True)
    lease = Episode.objects.across_tenants("test").get(session_id="the-lease")
    assert f"(id {lease.public_id}" in named and lease.public_id not in text


def test_an_outsider_gets_no_context_from_the_tenant(maya, outsider):
    response = outsider.post("/api/v1/context", {"query": "shellfish allergy Maya", "max_tokens": 500})
    assert response.status_code == 200 and "shellfish" not in response.json()["text"]


def test_a_fact_written_twice_appears_once_in_the_context(caller):
    """The README's quick start and worked example once wrote the same fact twice, the second time
    pinned: the context listed it as a standing fact and again as a relevant memory."""
    text = "Ana is allergic to peanuts."
    assert caller.post("/api/v1/memories", {"text": text, "user_id": "ana"}).status_code == 201
    assert (
        caller.post("/api/v1/memories", {"text": text, "user_id": "ana", "anchor": True}).status_code == 201
    )
    assert caller.post("/api/v1/memories", {"text": "Ana likes hiking.", "user_id": "ana"}).status_code == 201
    body = caller.post(
        "/api/v1/context", {"user_id": "ana", "query": "what is Ana allergic to?", "max_tokens": 500}
    ).json()
    assert body["text"].count(text) == 1, body["text"]
    assert [item["text"].endswith(text) for item in body["sections"]["anchors"]] == [True]
    assert all(text not in item["text"] for item in body["sections"]["relevant"])
