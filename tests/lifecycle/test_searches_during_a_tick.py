"""What a search meets while a tick moves the tenant's episodes out of hot (docs/decisions/0033):
BM25 statistics without the documents that left Redis, and the tiers weighed by the new split."""

from __future__ import annotations

import pytest

from episodes.scope import Scope
from episodes.stores import archive
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


def test_a_removed_document_still_counted_makes_a_word_in_every_document_outweigh_all(provided):
    # Why every move out of hot is collected at once: RediSearch 2.10 counts a removed document
    # in its words' document frequencies until its collector runs, and a word's IDF wraps around
    # once that frequency passes the number of documents.
    tenant = provided.tenant
    gone = [conversation(tenant, session=f"old{i}", idle_days=60, seed=i, texts=NAMED[i]) for i in range(3)]
    conversation(tenant, session="new", idle_days=0, seed=9, texts=NAMED[1])
    sane = best_score(tenant, "Marco")
    wrapped = []
    for episode_id in gone:  # (three times: the collector's own run could fall in between)
        episode_pack(tenant=tenant, episode_id=episode_id, layer="warm", now=NOW, actor="test")
        wrapped.append(best_score(tenant, "Marco"))
        hot_store().collect_garbage(tenant.id.hex)
    assert sane < 1.0 and max(wrapped) > 20.0 and best_score(tenant, "Marco") < 1.0


def test_a_search_between_two_batches_of_moves_meets_no_removed_document(provided, monkeypatch):
    tenant = provided.tenant
    leaving = [
        conversation(tenant, session=f"old{i}", idle_days=60, seed=10 * i, texts=NAMED[i % 3])
        for i in range(4)
    ]
    conversation(tenant, session="new", idle_days=0, seed=99, texts=NAMED[2])
    monkeypatch.setattr(moves, "HOT_TO_WARM_BATCH", 2)
    seen: list[tuple[int, float]] = []

    def hook(label: str) -> None:
        if label == f"compressed:{leaving[2]}":  # the second batch is being written
            seen.append((len(hot_store().episode_ids(tenant.id.hex)), best_score(tenant, "Marco")))

    run = tick_run(tenant=tenant, now=NOW, hook=hook, steps=["hot_to_warm"])
    assert run.counts["hot_to_warm"] == 4
    # The first batch has left Redis (3 of 5 episodes are still there), and "Marco", in every
    # document, weighs next to nothing, as it should.
    assert seen == [(3, seen[0][1])] and seen[0][1] < 1.0


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


def test_a_tick_that_retags_a_hot_episode_leaves_no_dead_copy_behind(provided):
    from memory_platform.redis_client import info_field

    from .factories import memory, strict_thresholds

    tenant = provided.tenant
    strict_thresholds(tenant)
    pk = memory(tenant, text="Marco: an unlinked remark nobody used.", idle_days=5, seed=8)
    store = hot_store()
    index = store.index_name(tenant.id.hex)

    def records() -> int:
        return int(info_field(store.client.execute_command("FT.INFO", index), "num_records"))

    run = tick_run(tenant=tenant, now=NOW, steps=["states"])
    assert run.counts["active_to_dormant"] == 1
    assert store.episode_ids(tenant.id.hex, Scope(states=("dormant",))) == {pk}  # rewritten
    after = records()
    store.collect_garbage(tenant.id.hex)
    assert records() == after  # the tick collected the copy its retag replaced
