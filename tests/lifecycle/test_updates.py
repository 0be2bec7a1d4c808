"""A newer memory that states a new value of what an older one of the same owner says supersedes
it (lifecycle.updates): linked at ingest, journaled, ranked above it (retrieval.ranking), never
across tenants or users (docs/decisions/0044-updates-above-what-they-replace.md)."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import F

from episodes.models import Episode, Link, LinkKind
from episodes.selectors import superseded_by
from lifecycle.models import JournalEntry
from lifecycle.rollback import rollback_journal_entry
from lifecycle.updates import ACTION
from retrieval.ranking import superseders_first
from tests.retrieval.test_search import search, turns

pytestmark = pytest.mark.django_db(transaction=True)

AUGUST = datetime(2026, 8, 4, 18, 0, tzinfo=UTC)
DINNER = [
    "Maya is coming over next week, remember she has a severe shellfish allergy.",
    "Got it: no shrimp, prawns, mussels or anything from the sea for Maya.",
]
FLAT_HUNT = [
    "Maya and I are looking at flats to rent in Lisbon, our budget is up to 1,600 EUR a month.",
    "Got it: rent up to 1,600 EUR. Any area in mind?",
    "We are leaning towards Alfama, close to the river.",
    "Alfama noted. I will keep an eye on listings there.",
]
LEASE = [
    "We decided on Arroios in the end, not Alfama.",
    "Congratulations! Did you sign already?",
    "Yes, we signed the lease at Rua Morais Soares, the rent is 1,750 EUR a month.",
    "Noted: you now rent in Arroios, 1,750 EUR a month.",
]
QUESTION = "Where did Maya end up renting, and how much is the rent?"


def maya(caller, user="maya"):
    turns(caller, "dinner-plans", DINNER, user=user, at=AUGUST)
    turns(caller, "flat-hunt", FLAT_HUNT, user=user, at=AUGUST + timedelta(days=9))
    turns(caller, "the-lease", LEASE, user=user, at=AUGUST + timedelta(days=40))
    mine = Episode.objects.across_tenants("test").filter(tenant=caller.tenant, user_id=user)
    return {
        name: mine.filter(session_id=name).latest("pk") for name in ("dinner-plans", "flat-hunt", "the-lease")
    }


def test_the_lease_supersedes_the_flat_hunt_and_ranks_first(caller):
    episodes = maya(caller)
    hunt, lease = episodes["flat-hunt"], episodes["the-lease"]
    said = (hunt.entities, hunt.decisions, hunt.state)
    links = Link.objects.across_tenants("test").filter(tenant=caller.tenant, kind=LinkKind.SUPERSEDES)
    assert list(links.values_list("src_id", "dst_id")) == [(lease.pk, hunt.pk)]
    assert superseded_by(caller.tenant, [e.pk for e in episodes.values()]) == {hunt.pk: lease.public_id}

    hits = search(caller, QUESTION, explain=True)["results"]
    ids = [h["episode_id"] for h in hits]
    assert ids[0] == lease.public_id
    assert ids.index(hunt.public_id) == 1  # right below: still found, the past is kept whole
    # It was below: its own score put the flat hunt first.
    assert hits[0]["explain"]["supersedes"] > 1
    # Nothing of the older memory was changed: its words and decisions are all there.
    hunt.refresh_from_db()
    assert (hunt.entities, hunt.decisions, hunt.state) == said


def test_the_change_is_journaled_and_a_rollback_removes_it_for_good(caller):
    episodes = maya(caller)
    hunt, lease = episodes["flat-hunt"], episodes["the-lease"]
    entry = JournalEntry.objects.across_tenants("test").get(tenant=caller.tenant, action=ACTION)
    assert entry.episode_id == hunt.pk and entry.actor == "ingest"
    assert entry.after["links_created"] == [[lease.pk, hunt.pk, "supersedes"]]
    assert entry.after["superseded_by"] == lease.public_id and "Alfama" in entry.after["entities"]

    rollback_journal_entry(entry, now=AUGUST + timedelta(days=41), actor="op")
    assert (
        not Link.objects.across_tenants("test")
        .filter(tenant=caller.tenant, kind=LinkKind.SUPERSEDES)
        .exists()
    )
    assert superseded_by(caller.tenant, [hunt.pk]) == {}
    # The operator's rollback stands: the lease saying it again links nothing.
    again = ["So it is Arroios now, not Alfama."]
    said = turns(
        caller, "the-lease", again, user="maya", at=AUGUST + timedelta(days=40, minutes=5), boundary=False
    )
    assert said["turns"][0]["episode_id"] == lease.public_id
    assert (
        not Link.objects.across_tenants("test")
        .filter(tenant=caller.tenant, kind=LinkKind.SUPERSEDES)
        .exists()
    )


def test_an_outsider_with_identical_memories_is_never_linked_to_the_tenant(caller, outsider):
    maya(caller)
    # The outsider's only memory is the lease: the tenant's flat hunt is not what it replaces.
    turns(outsider, "the-lease", LEASE, user="maya", at=AUGUST + timedelta(days=40))
    assert (
        not Link.objects.across_tenants("test")
        .filter(tenant=outsider.tenant)
        .exclude(kind=LinkKind.CONTINUES)
        .exists()
    )
    # With the same sessions, each tenant links its own two memories, and nothing across.
    theirs = maya(outsider)
    supersedes = Link.objects.across_tenants("test").filter(kind=LinkKind.SUPERSEDES)
    assert supersedes.count() == 2
    assert not supersedes.exclude(src__tenant=F("tenant"), dst__tenant=F("tenant")).exists()
    hunt = theirs["flat-hunt"]
    assert superseded_by(outsider.tenant, [hunt.pk]) == {hunt.pk: theirs["the-lease"].public_id}
    mine = set(
        Episode.objects.across_tenants("test")
        .filter(tenant=caller.tenant)
        .values_list("public_id", flat=True)
    )
    assert not mine & {h["episode_id"] for h in search(outsider, QUESTION)["results"]}


def test_memories_of_two_users_are_never_linked(caller):
    turns(caller, "flat-hunt", FLAT_HUNT, user="maya", at=AUGUST + timedelta(days=9))
    turns(caller, "the-lease", LEASE, user="joao", at=AUGUST + timedelta(days=40))
    assert (
        not Link.objects.across_tenants("test")
        .filter(tenant=caller.tenant, kind=LinkKind.SUPERSEDES)
        .exists()
    )
    # Nor two agents of one user.
    turns(caller, "the-lease", LEASE, user="maya", agent="a2", at=AUGUST + timedelta(days=41))
    assert (
        not Link.objects.across_tenants("test")
        .filter(tenant=caller.tenant, kind=LinkKind.SUPERSEDES)
        .exists()
    )


def test_an_explicit_memory_supersedes_too(caller):
    turns(caller, "flat-hunt", FLAT_HUNT, user="maya", at=AUGUST + timedelta(days=9))
    hunt = Episode.objects.across_tenants("test").get(tenant=caller.tenant, session_id="flat-hunt")
    fact = {
        "text": "Maya now rents in Arroios, not Alfama: 1,750 EUR a month.",
        "kind": "fact",
        "user_id": "maya",
        "agent_id": "a1",
        "occurred_at": (AUGUST + timedelta(days=40)).isoformat(),
    }
    response = caller.post("/api/v1/memories", fact)
    assert response.status_code == 201, response.json()
    assert superseded_by(caller.tenant, [hunt.pk]) == {hunt.pk: response.json()["id"]}
    assert JournalEntry.objects.across_tenants("test").get(tenant=caller.tenant, action=ACTION).actor == "api"


def test_a_plan_or_an_older_mention_updates_nothing(caller):
    turns(caller, "flat-hunt", FLAT_HUNT, user="maya", at=AUGUST + timedelta(days=9))
    # Said later, but no change: a plan, a question.
    turns(
        caller,
        "plans",
        ["We will visit Alfama again on Sunday."],
        user="maya",
        at=AUGUST + timedelta(days=12),
    )
    assert (
        not Link.objects.across_tenants("test")
        .filter(tenant=caller.tenant, kind=LinkKind.SUPERSEDES)
        .exists()
    )


def test_a_chain_of_updates_ends_newest_on_top():
    class Row:
        def __init__(self, pk, day, superseded_by=()):
            self.pk, self.superseded_by = pk, superseded_by
            self.last_occurred_at = AUGUST + timedelta(days=day)

    # 1 (August) superseded by 2 (September), superseded by 3 (October); 4 stands apart.
    ranked = {1: Row(1, 0, (2, 3)), 2: Row(2, 30, (3,)), 3: Row(3, 60), 4: Row(4, 10)}
    scored = [(1, 0.09, {}), (4, 0.05, {}), (2, 0.04, {}), (3, 0.01, {})]
    out = sorted(superseders_first(scored, ranked), key=lambda x: -x[1])  # type: ignore[arg-type]
    assert [pk for pk, _, _ in out] == [3, 2, 1, 4]
    # A superseder already above stays where it is.
    scored = [(2, 0.2, {}), (1, 0.1, {})]
    assert superseders_first(scored, {1: Row(1, 0, (2,)), 2: Row(2, 30)}) == scored  # type: ignore[arg-type]
