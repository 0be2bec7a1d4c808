"""What a search meets while a tick moves the tenant's episodes out of hot (docs/decisions/0033):
BM25 statistics without the documents that left Redis, and the tiers weighed by the new split."""

from __future__ import annotations

import pytest

from episodes.scope import Scope
from episodes.stores import archive, keys
from episodes.stores.bm25_probe import BALLAST, WRAPPED_SCORE
from episodes.stores.hot import hot_store
from lifecycle import moves
from lifecycle.services import episode_pack
from lifecycle.tick import tick_run
from memory_platform.tenancy.models import Tenant
from tests.conftest import Caller

from .factories import NOW, TOPICS, conversation

pytestmark = pytest.mark.django_db(transaction=True)

# Every turn names its speaker, as a transcript does: a word in every document of the index.
NAMED = [[f"Marco: {text}" for text in topic] for topic in TOPICS]


def best_score(tenant: Tenant, word: str) -> float:
    _, hits, _ = hot_store().search(
        tenant.id.hex, vector=None, text=word, scope=Scope(states=("active",)), k=50
    )
    assert hits
    return max(hit.score for hit in hits)


def test_a_removed_document_still_counted_would_make_a_word_in_every_document_outweigh_all(provided):
    # Why each tenant's index holds ballast documents (episodes.stores.bm25_probe): RediSearch 2.10
    # counts a removed document in its words' document frequencies until its collector runs, and
    # a word's IDF wraps around once that frequency passes the number of documents, which the
    # ballast counts in.
    tenant = provided.tenant
    store = hot_store()
    gone = [conversation(tenant, session=f"old{i}", idle_days=60, seed=i, texts=NAMED[i]) for i in range(3)]
    conversation(tenant, session="new", idle_days=0, seed=9, texts=NAMED[1])
    sane = best_score(tenant, "Marco")
    episode_pack(tenant=tenant, episode_id=gone[0], layer="warm", now=NOW, actor="test")
    assert 0 < best_score(tenant, "Marco") <= sane < WRAPPED_SCORE
    # Without the ballast (the removal collected at once: more than half its worth went)...
    store.client.delete(*(keys.ballast_key(tenant.id.hex, i) for i in range(BALLAST)))
    store.collect_garbage(tenant.id.hex)
    # ... the next episode out of hot sends the word up, and no collection comes for so few.
    episode_pack(tenant=tenant, episode_id=gone[1], layer="warm", now=NOW, actor="test")
    assert best_score(tenant, "Marco") > WRAPPED_SCORE


def test_a_search_between_two_batches_of_moves_meets_no_removed_document(provided, monkeypatch):
    tenant = provided.tenant
    leaving = [
        conversation(tenant, session=f"old{i}", idle_days=60, seed=10 * i, texts=NAMED[i % 3])
        for i in range(4)
    ]
    conversation(tenant, session="new", idle_days=0, seed=99, texts=NAMED[2])
    monkeypatch.setattr(moves, "HOT_TO_WARM_BATCH", 2)
    seen: list[tuple[int, float]] = []
    sane = best_score(tenant, "Marco")

    def hook(label: str) -> None:
        if label == f"compressed:{leaving[2]}":  # the second batch is being written
            seen.append((len(hot_store().episode_ids(tenant.id.hex)), best_score(tenant, "Marco")))

    run = tick_run(tenant=tenant, now=NOW, hook=hook, steps=["hot_to_warm"])
    assert run.counts["hot_to_warm"] == 4
    # The first batch has left Redis (3 of 5 episodes are still there), and "Marco", in every
    # document, weighs no more than before it left, as it should (its removed documents are
    # counted within the ballast until the collector takes them).
    assert seen == [(3, seen[0][1])] and 0 < seen[0][1] <= sane < WRAPPED_SCORE


def test_the_split_between_the_tiers_is_counted_again_after_a_move(provided):
    tenant = provided.tenant
    outsider = Caller("outsider-co", embedder="provided").tenant
    first = conversation(tenant, session="a", idle_days=60, seed=1)
    second = conversation(tenant, session="b", idle_days=60, seed=2)
    conversation(outsider, session="a", idle_days=60, seed=3)
    episode_pack(tenant=tenant, episode_id=first, layer="warm", now=NOW, actor="test")
    version = archive.layers_version_if_any(tenant, ("warm", "cold"))
    assert version is not None
    assert archive.turn_counts(tenant, version) == (10, 5)

    episode_pack(tenant=tenant, episode_id=second, layer="cold", now=NOW, actor="test")
    moved = archive.layers_version_if_any(tenant, ("warm", "cold"))
    # Two moves (hot -> warm -> cold), counted at once, not when the cached split expires.
    assert moved == version + 2
    assert archive.turn_counts(tenant, moved) == (10, 10)
    assert archive.turn_counts(tenant) == (10, 10)  # no version: whatever is cached
    # Another tenant's moves are not ours, and ours not its.
    assert archive.layers_version_if_any(outsider, ("warm", "cold")) is None
    assert Tenant.objects.get(pk=outsider.pk).layers_version == 0


def test_a_tick_that_retags_a_hot_episode_leaves_its_words_their_weight(provided):
    from memory_platform.redis_client import info_field

    from .factories import memory, strict_thresholds

    tenant = provided.tenant
    strict_thresholds(tenant)
    pk = memory(tenant, text="Marco: an unlinked remark nobody used.", idle_days=5, seed=8)
    store = hot_store()
    index = store.index_name(tenant.id.hex)

    def records() -> int:
        return int(info_field(store.client.execute_command("FT.INFO", index), "num_records"))

    before = records()
    run = tick_run(tenant=tenant, now=NOW, steps=["states"])
    assert run.counts["active_to_dormant"] == 1
    assert store.episode_ids(tenant.id.hex, Scope(states=("dormant",))) == {pk}  # rewritten
    # The copies its retag replaced wait for the collector (fewer than half the ballast), counted
    # within the ballast: a word in every document keeps its weight.
    assert records() > before
    _, hits, _ = store.search(tenant.id.hex, vector=None, text="Marco", scope=Scope(states=("dormant",)), k=5)
    assert hits and max(hit.score for hit in hits) < WRAPPED_SCORE
