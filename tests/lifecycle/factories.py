"""Episodes at chosen ages for lifecycle tests, with caller-provided vectors (no model to load)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from episodes.models import Episode, Layer, State, Turn
from episodes.scope import Scope
from episodes.services import MemoryInput, TurnInput
from episodes.stores.hot import hot_store
from lifecycle import scoring
from lifecycle.models import Candidate, policy_row
from lifecycle.services import memory_create, turns_ingest
from lifecycle.tick import tick_run
from tests.conftest import unit_vectors

# Before the wall clock of the machines, so an episode is as old as when it happened (born_at).
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

TOPICS = [
    [
        "Marco booked the cabin near Lake Tahoe for the second week of August.",
        "It cost $1,450 for six nights, so about $240 each if all six of us come.",
        "Daniel said the billing release slipped to August 9, so he may only come for the weekend.",
        "We decided to cook most dinners at the cabin and plan a big pasta night.",
        "Ana sent a recipe for grilled trout with lemon and herbs from her class in Portland.",
    ],
    [
        "The Apollo migration to Postgres 18 starts on March 3 with the billing tables.",
        "Priya will own the rollback plan and the runbook for the on-call team.",
        "We agreed to keep the old cluster read-only for two weeks after the switch.",
        "Latency on the search endpoint must stay under 120 ms at p95 during the move.",
        "The dashboards in Grafana need new panels for replication lag and vacuum.",
    ],
    [
        "Lena started learning the cello in January and practises every evening.",
        "Her teacher, Mr. Okafor, suggested the Bach suite in G major for the spring recital.",
        "The recital is at the Riverside community hall on May 18 at 6 pm.",
        "She decided to rent a better instrument from the shop on Elm Street.",
        "Her goal is to play in the city youth orchestra by next autumn.",
    ],
]


LONG = [" ".join(parts) for parts in zip(*TOPICS, strict=True)]


def vectors_near(seed: int, count: int, spread: float = 0.25) -> np.ndarray:
    """Unit vectors close to one another (one topic), far from another seed's."""
    base = unit_vectors(1, seed=seed)[0]
    noise = unit_vectors(count, seed=seed + 1000)
    out = base[None, :] + spread * noise
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype("float32")


def conversation(
    tenant,
    *,
    session: str,
    idle_days: float,
    now: datetime = NOW,
    topic: int = 0,
    seed: int = 0,
    user: str = "u1",
    texts: list[str] | None = None,
) -> int:
    """One episode of a conversation that happened (and was last used) ``idle_days`` before ``now``."""
    at = now - timedelta(days=idle_days)
    texts = texts or TOPICS[topic % len(TOPICS)]
    vectors = vectors_near(seed, len(texts))
    result = turns_ingest(
        tenant=tenant,
        turns=[
            TurnInput(
                role="user" if i % 2 == 0 else "assistant",
                text=text,
                scope=Scope.owner(user_id=user, session_id=session),
                occurred_at=at + timedelta(seconds=30 * i),
                vector=vectors[i],
                episode_boundary=i == 0,
            )
            for i, text in enumerate(texts)
        ],
        now=at,
    )
    assert len(result.episode_ids) == 1, "the turns of one topic should form one episode"
    return result.episode_ids[0]


def memory(
    tenant,
    *,
    text: str,
    idle_days: float,
    now: datetime = NOW,
    anchor: bool = False,
    seed: int = 0,
    kind: str = "fact",
    vector: np.ndarray | None = None,
) -> int:
    at = now - timedelta(days=idle_days)
    if vector is None:
        vector = unit_vectors(1, seed=seed)[0]
    episode = memory_create(
        tenant=tenant,
        memory=MemoryInput(text=text, kind=kind, anchor=anchor, occurred_at=at, vector=vector),
        now=at,
    )
    return episode.pk


def assert_consistent(tenant) -> None:
    """Every episode in exactly one tier: Postgres' live hot episodes are exactly the ones in Redis,
    with all their turn documents, and nothing else of the tenant is in Redis."""
    live_hot = (
        Episode.objects.across_tenants("test")
        .filter(tenant=tenant, layer=Layer.HOT)
        .exclude(state=State.FORGOTTEN)
    )
    store = hot_store()
    assert store.episode_ids(tenant.id.hex) == set(live_hot.values_list("pk", flat=True))
    turns = Turn.objects.across_tenants("test").filter(episode__in=live_hot, embedding__isnull=False).count()
    assert store.count(tenant.id.hex) == turns
    assert not Episode.objects.across_tenants("test").filter(tenant=tenant, needs_reindex=True).exists()


def layers(tenant) -> dict[int, str]:
    return dict(Episode.objects.across_tenants("test").filter(tenant=tenant).values_list("pk", "layer"))


def strict_thresholds(tenant) -> None:
    """Thresholds of the worked examples (θ_active 0.5, θ_delete 0.0): a few idle days make an
    unlinked episode dormant, which the state tests need to see within a short history."""
    from lifecycle.models import policy_row

    policy = policy_row(tenant)
    policy.theta_active, policy.theta_delete = 0.5, 0.0
    policy.save(update_fields=["theta_active", "theta_delete"])


def merge_proposal(tenant):
    """Two near-duplicate memories a tick proposes to merge, both back in hot and indexed (to see
    Redis follow what is done with the proposal); returns the proposal."""
    strict_thresholds(tenant)
    near = vectors_near(5, 2, spread=0.05)
    a = memory(tenant, text="Budget review moved to Friday.", idle_days=40, vector=near[0])
    b = memory(tenant, text="The budget review is now on Friday.", idle_days=40, vector=near[1])
    tick_run(tenant=tenant, now=NOW)
    Episode.objects.across_tenants("test").filter(pk__in=[a, b]).update(layer=Layer.HOT, needs_reindex=True)
    tick_run(tenant=tenant, now=NOW, steps=["repair"])
    return Candidate.objects.across_tenants("test").get(tenant=tenant, kind="merge")


#: The idle ages of the ``ages`` fixture's conversations (tests/lifecycle/conftest.py).
IDLE_DAYS = [1, 10, 20, 50, 100, 200]


def set_policy(tenant, **fields):
    """Change the tenant's policy, each value checked as the model checks it."""
    policy = policy_row(tenant)
    for name, value in fields.items():
        setattr(policy, name, value)
    policy.full_clean()
    policy.save()


def expected_layers(tenant, now):
    """The layer the policy gives each of the tenant's episodes at ``now``."""
    policy = policy_row(tenant)
    out = {}
    for episode in Episode.objects.across_tenants("test").filter(tenant=tenant):
        out[episode.pk] = scoring.layer_for(scoring.EpisodeStats.from_episode(episode), policy, now)
    return out
