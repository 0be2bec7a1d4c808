"""Merge proposals stay within one person (docs/decisions/0040-merges-within-one-scope.md): the
tick proposes merges only between memories of the same user and agent, one proposal per member of
a cluster of near-duplicates into one survivor; an approval across people is refused; the data
migration withdraws the crossing proposals made before; the console shows whose each memory is."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.apps import apps

from episodes.models import Episode, Link, State
from episodes.scope import Scope
from episodes.services import MemoryInput
from lifecycle.candidates import CandidateError, candidate_approve, candidate_reject
from lifecycle.models import Candidate, JournalEntry
from lifecycle.services import memory_create
from lifecycle.tick import tick_run
from tests.conftest import Caller

from .factories import NOW, strict_thresholds, vectors_near

pytestmark = pytest.mark.django_db(transaction=True)

SENTENCE = "Prefers email over phone calls for support."
TOPICS = [
    SENTENCE,
    "Wants invoices sent at the end of each month.",
    "Their office is closed on Fridays.",
]
MIGRATION = importlib.import_module("lifecycle.migrations.0010_merges_within_one_scope")


def said(tenant, user: str, vector, *, text: str = SENTENCE, agent: str = "", idle_days: float = 40) -> int:
    """A memory of ``user`` (and ``agent``) written ``idle_days`` before NOW."""
    at = NOW - timedelta(days=idle_days)
    episode = memory_create(
        tenant=tenant,
        memory=MemoryInput(
            text=text, scope=Scope.owner(user_id=user, agent_id=agent), occurred_at=at, vector=vector
        ),
        now=at,
    )
    return episode.pk


def owners(candidate: Candidate) -> tuple[tuple[str, str], tuple[str, str]]:
    return (
        (candidate.episode.user_id, candidate.episode.agent_id),
        (candidate.other.user_id, candidate.other.agent_id),
    )


def merges(tenant):
    return list(
        Candidate.objects.across_tenants("test")
        .filter(tenant=tenant, kind="merge")
        .select_related("episode", "other")
    )


def assert_one_proposal_per_member(proposals) -> None:
    """No episode merged twice, none both a survivor and merged, no pair in two proposals."""
    merged = [c.episode_id for c in proposals]
    survivors = {c.other_id for c in proposals}
    assert len(merged) == len(set(merged))
    assert not survivors & set(merged)
    pairs = [frozenset((c.episode_id, c.other_id)) for c in proposals]
    assert len(pairs) == len(set(pairs))


def test_the_same_sentence_of_three_users_is_never_merged_across_them(provided):
    tenant = provided.tenant
    strict_thresholds(tenant)
    near = vectors_near(5, 6, spread=0.01)
    ann, bob, chen = (said(tenant, user, near[i]) for i, user in enumerate(["u-ann", "u-bob", "u-chen"]))
    bob_again = said(tenant, "u-bob", near[3], idle_days=41)
    # The same user through two agents: two scopes as well.
    by_agent = [said(tenant, "u-dia", near[4], agent="a-1"), said(tenant, "u-dia", near[5], agent="a-2")]

    tick_run(tenant=tenant, now=NOW)

    [proposal] = merges(tenant)
    assert {proposal.episode_id, proposal.other_id} == {bob, bob_again}
    assert owners(proposal) == (("u-bob", ""), ("u-bob", ""))
    assert proposal.similarity >= 0.92
    untouched = [ann, chen, *by_agent]
    assert not Candidate.objects.across_tenants("test").filter(episode_id__in=untouched).exists()
    assert not Candidate.objects.across_tenants("test").filter(other_id__in=untouched).exists()


def test_a_cluster_of_one_user_is_proposed_once_into_one_survivor(provided):
    tenant = provided.tenant
    strict_thresholds(tenant)
    near = vectors_near(7, 4, spread=0.01)
    # The most recently written copy scores highest: it survives.
    copies = [said(tenant, "u-bob", near[i], idle_days=40 + i) for i in range(4)]

    run = tick_run(tenant=tenant, now=NOW)

    proposals = merges(tenant)
    assert_one_proposal_per_member(proposals)
    assert {c.other_id for c in proposals} == {copies[0]}
    assert sorted(c.episode_id for c in proposals) == copies[1:]
    assert all(c.similarity >= 0.92 and c.status == "proposed" for c in proposals)
    assert run.counts["merge_candidates"] == 3
    assert (
        JournalEntry.objects.across_tenants("test").filter(tick_run=run, action="propose_merge").count() == 3
    )

    # Idempotent: a tick run again proposes nothing, and a rejection is not proposed again.
    tick_run(tenant=tenant, now=NOW + timedelta(hours=1))
    assert len(merges(tenant)) == 3
    rejected = proposals[0]
    candidate_reject(candidate=rejected, now=NOW + timedelta(hours=2), actor="test")
    tick_run(tenant=tenant, now=NOW + timedelta(hours=3))
    assert len(merges(tenant)) == 3
    assert Candidate.objects.across_tenants("test").get(pk=rejected.pk).status == "rejected"


def test_clusters_of_three_users_give_one_proposal_per_member_and_no_chains(provided):
    """The measured case: three users, three sentences each, four copies of each (36 memories)."""
    tenant = provided.tenant
    strict_thresholds(tenant)
    users = ["u-ann", "u-bob", "u-chen"]
    survivors = set()
    for t, text in enumerate(TOPICS):
        near = vectors_near(20 + t, 12, spread=0.01)
        for u, user in enumerate(users):
            ids = [said(tenant, user, near[4 * u + i], text=text, idle_days=40 + i) for i in range(4)]
            survivors.add(ids[0])

    tick_run(tenant=tenant, now=NOW)

    proposals = merges(tenant)
    assert len(proposals) == 27  # three per cluster of four
    assert_one_proposal_per_member(proposals)
    assert {c.other_id for c in proposals} == survivors
    for proposal in proposals:
        mine, theirs = owners(proposal)
        assert mine == theirs


def test_another_tenants_identical_memories_never_appear(provided):
    tenant = provided.tenant
    outsider = Caller("outsider-co", embedder="provided").tenant
    strict_thresholds(tenant)
    strict_thresholds(outsider)
    near = vectors_near(9, 2, spread=0.01)
    ours = [said(tenant, "u-bob", near[0]), said(tenant, "u-bob", near[1], idle_days=41)]
    theirs = [said(outsider, "u-bob", near[0]), said(outsider, "u-bob", near[1], idle_days=41)]

    tick_run(tenant=tenant, now=NOW)

    [proposal] = merges(tenant)
    assert {proposal.episode_id, proposal.other_id} == set(ours)
    assert not Candidate.objects.across_tenants("test").filter(tenant=outsider).exists()
    tick_run(tenant=outsider, now=NOW)
    [their_proposal] = merges(outsider)
    assert {their_proposal.episode_id, their_proposal.other_id} == set(theirs)
    assert len(merges(tenant)) == 1


def crossing(tenant, *, status: str = "proposed") -> Candidate:
    """A merge proposal from one user's memory into another's, as the tick made them before."""
    near = vectors_near(11, 2, spread=0.01)
    chen = said(tenant, "u-chen", near[0])
    bob = said(tenant, "u-bob", near[1])
    return Candidate.objects.create(
        tenant=tenant,
        kind="merge",
        episode_id=chen,
        other_id=bob,
        similarity=0.99,
        score=0.1,
        status=status,
        created_at=NOW,
    )


def test_approving_a_merge_across_users_is_refused_and_changes_nothing(provided):
    tenant = provided.tenant
    candidate = crossing(tenant)
    before = Episode.objects.across_tenants("test").get(pk=candidate.episode_id)
    entries = JournalEntry.objects.across_tenants("test").filter(tenant=tenant).count()

    with pytest.raises(CandidateError, match="u-chen.*u-bob"):
        candidate_approve(candidate=candidate, now=NOW, actor="test")

    after = Episode.objects.across_tenants("test").get(pk=candidate.episode_id)
    assert after.state == before.state != State.FORGOTTEN and after.version == before.version
    assert not Link.objects.across_tenants("test").filter(tenant=tenant).exists()
    assert JournalEntry.objects.across_tenants("test").filter(tenant=tenant).count() == entries
    assert Candidate.objects.across_tenants("test").get(pk=candidate.pk).status == "proposed"


def test_the_migration_withdraws_crossing_proposals_journaled_and_reverses(provided):
    tenant = provided.tenant
    outsider = Caller("outsider-co", embedder="provided").tenant
    crossed = crossing(tenant)
    decided = crossing(tenant, status="rejected")
    near = vectors_near(13, 2, spread=0.01)
    same = Candidate.objects.create(
        tenant=tenant,
        kind="merge",
        episode_id=said(tenant, "u-bob", near[0]),
        other_id=said(tenant, "u-bob", near[1]),
        similarity=0.99,
        score=0.1,
    )
    theirs = crossing(outsider)

    MIGRATION.withdraw_crossing_merges(apps, None, now=NOW)

    for pk in (crossed.pk, theirs.pk):
        withdrawn = Candidate.objects.across_tenants("test").get(pk=pk)
        assert withdrawn.status == "rejected" and withdrawn.decided_by == "migration"
        assert "different users or agents" in withdrawn.note and withdrawn.decided_at is not None
    entry = JournalEntry.objects.across_tenants("test").get(tenant=tenant, action="withdraw_candidate")
    assert entry.actor == "migration" and entry.episode_id == crossed.episode_id
    assert entry.episode_id_value == crossed.episode_id
    assert entry.before == {} and entry.created_at == NOW
    assert entry.after["candidate_id"] == crossed.pk and entry.after["other"] == crossed.other_id
    assert (
        JournalEntry.objects.across_tenants("test")
        .filter(tenant=outsider, action="withdraw_candidate")
        .count()
        == 1
    )
    assert Candidate.objects.across_tenants("test").get(pk=same.pk).status == "proposed"
    assert (
        Candidate.objects.across_tenants("test").get(pk=decided.pk).decided_by == ""
    )  # decided before: left alone

    # Run twice, it withdraws nothing more.
    MIGRATION.withdraw_crossing_merges(apps, None, now=NOW)
    assert JournalEntry.objects.across_tenants("test").filter(action="withdraw_candidate").count() == 2

    MIGRATION.reopen_withdrawn_merges(apps, None, now=NOW)
    reopened = Candidate.objects.across_tenants("test").get(pk=crossed.pk)
    assert (reopened.status, reopened.decided_by, reopened.note, reopened.decided_at) == (
        "proposed",
        "",
        "",
        None,
    )
    assert Candidate.objects.across_tenants("test").get(pk=decided.pk).status == "rejected"
    assert JournalEntry.objects.across_tenants("test").get(pk=entry.pk).rolled_back_at == NOW


def test_the_console_shows_both_memories_and_both_owners(provided, admin_client):
    tenant = provided.tenant
    candidate = crossing(tenant)
    chen, bob = candidate.episode, candidate.other

    listing = admin_client.get("/admin/lifecycle/candidate/").content.decode()
    for episode in (chen, bob):
        assert episode.public_id in listing
    assert "user u-chen" in listing and "user u-bob" in listing

    page = admin_client.get(f"/admin/lifecycle/candidate/{candidate.pk}/change/")
    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="merge-review"' in body
    for episode, user in ((chen, "u-chen"), (bob, "u-bob")):
        assert f'data-episode="{episode.public_id}"' in body
        assert user in body
    assert body.count(SENTENCE) >= 2
    assert "different users or agents" in body
    # An approval from the console is refused with the reason.
    answer = admin_client.post(
        "/admin/lifecycle/candidate/",
        {"action": "approve", "_selected_action": [candidate.pk]},
        follow=True,
    )
    assert "different users or agents" in answer.content.decode()
    assert Candidate.objects.across_tenants("test").get(pk=candidate.pk).status == "proposed"


def test_merge_neighbours_in_memory_are_the_index_search_s(monkeypatch):
    """A small tenant's merge neighbours are ranked in memory from one read of its vectors; they
    are the pairs the per-episode nearest-neighbour search finds: same kind and owner, packed,
    not forgotten, never the episode itself or another tenant's copy, cosines to float precision."""
    import numpy as np

    from episodes.stores import merges

    tenant, outsider = (
        Caller("mem-a", embedder="provided").tenant,
        Caller("mem-b", embedder="provided").tenant,
    )
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(6, 384))
    at = NOW - timedelta(days=40)
    made = []
    for t in (tenant, outsider):
        for k in range(90):
            vector = centres[k % 6] + rng.uniform(0.05, 0.6) * rng.normal(size=384)
            made.append(
                Episode(
                    tenant=t,
                    user_id=f"u{k % 3}",
                    agent_id="a" if k % 5 == 0 else "",
                    kind="fact" if k % 4 else "episode",
                    layer="hot" if k % 11 == 0 else ("cold" if k % 2 else "warm"),
                    state=State.FORGOTTEN if k % 13 == 0 else State.ACTIVE,
                    embedding=(vector / np.linalg.norm(vector)).astype("float32") if k % 17 else None,
                    first_occurred_at=at,
                    last_occurred_at=at,
                    last_accessed_at=at,
                )
            )
    Episode.objects.bulk_create(made)
    ids = list(Episode.objects.across_tenants("test").filter(tenant=tenant).values_list("pk", flat=True))
    sources = ids[::2] + [ids[11]]  # a hot one too: searched from, never found

    in_memory = merges.merge_neighbours(tenant, sources, neighbours=3, threshold=0.6, packed=180)
    monkeypatch.setattr(merges, "MERGE_IN_MEMORY", 0)
    assert merges._merge_neighbours_in_memory(tenant, sources, neighbours=3, threshold=0.6) is None
    searched = merges.merge_neighbours(tenant, sources, neighbours=3, threshold=0.6, packed=180)

    assert len(in_memory) > 20  # pairs above the threshold exist
    assert sorted((a, b) for a, b, _ in in_memory) == sorted((a, b) for a, b, _ in searched)
    by_pair = {(a, b): sim for a, b, sim in searched}
    assert all(abs(sim - by_pair[(a, b)]) < 1e-5 for a, b, sim in in_memory)
    assert set(b for _, b, _ in in_memory) <= set(ids)
