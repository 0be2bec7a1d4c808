"""Every change of layer goes through lifecycle.transitions: the tick, unpacking, pinning and the
admin's actions each journal it, keep Redis in step, and can be rolled back exactly."""

from __future__ import annotations

from datetime import timedelta

import pytest

from episodes.models import Episode, Layer
from episodes.stores.hot import hot_store
from lifecycle.models import JournalEntry
from lifecycle.rollback import rollback_journal_entry
from lifecycle.services import episode_pack, episode_pin
from lifecycle.tick import tick_run

from .factories import NOW, assert_consistent, conversation

pytestmark = pytest.mark.django_db(transaction=True)


def _in_redis(tenant) -> set[int]:
    return hot_store().episode_ids(tenant.id.hex)


def test_pinning_a_cold_episode_promotes_it_journaled_and_reversible(provided):
    tenant = provided.tenant
    pk = conversation(tenant, session="c", idle_days=120, topic=0, seed=1)
    tick_run(tenant=tenant, now=NOW)
    cold = Episode.objects.across_tenants("test").get(pk=pk)
    assert cold.layer == Layer.COLD and pk not in _in_redis(tenant)

    pinned = episode_pin(tenant=tenant, episode_id=pk, anchor=True, now=NOW, actor="api:test")
    assert pinned.layer == Layer.HOT and pinned.anchor and pinned.restored_at == NOW
    # The turns are its searchable text again (the pin of earlier versions kept the cold headline).
    turns = list(pinned.turns.order_by("seq").values_list("text", flat=True))
    assert pinned.search_text == "\n".join(turns)
    assert pk in _in_redis(tenant)
    entry = JournalEntry.objects.across_tenants("test").get(episode_id=pk, action="pin")
    assert entry.before["layer"] == "cold" and entry.before["anchor"] is False
    assert entry.after["reason"] == "pin" and entry.actor == "api:test"

    rollback_journal_entry(entry, now=NOW + timedelta(minutes=1))
    back = Episode.objects.across_tenants("test").get(pk=pk)
    assert (back.layer, back.anchor, back.search_text) == (Layer.COLD, False, cold.search_text)
    assert pk not in _in_redis(tenant)
    assert_consistent(tenant)


def test_pinning_a_hot_episode_is_journaled_without_a_move(provided):
    tenant = provided.tenant
    pk = conversation(tenant, session="h", idle_days=0, topic=1, seed=2)
    episode_pin(tenant=tenant, episode_id=pk, anchor=True, now=NOW, actor="api:test")
    entry = JournalEntry.objects.across_tenants("test").get(episode_id=pk, action="anchor")
    assert entry.before == {"anchor": False} and entry.after == {"anchor": True}
    assert Episode.objects.across_tenants("test").get(pk=pk).layer == Layer.HOT


def test_an_operator_packs_and_the_pack_is_journaled_and_leaves_redis(provided):
    tenant = provided.tenant
    pk = conversation(tenant, session="p", idle_days=0, topic=2, seed=3)
    assert pk in _in_redis(tenant)
    episode_pack(tenant=tenant, episode_id=pk, layer=Layer.COLD, now=NOW, actor="admin:op")
    episode = Episode.objects.across_tenants("test").get(pk=pk)
    assert episode.layer == Layer.COLD and episode.headline and episode.summary
    actions = list(
        JournalEntry.objects.across_tenants("test")
        .filter(episode_id=pk)
        .order_by("pk")
        .values_list("action", "actor")
    )
    assert actions == [("hot_to_warm", "admin:op"), ("warm_to_cold", "admin:op")]
    assert pk not in _in_redis(tenant)
    assert_consistent(tenant)


def test_a_move_halts_when_the_episode_was_touched(provided):
    """Halt on touch (docs/concepts.md#halt-on-touch): a write at a stale version changes nothing."""
    from lifecycle import transitions
    from lifecycle.compression import WarmShape

    tenant = provided.tenant
    pk = conversation(tenant, session="t", idle_days=0, topic=0, seed=4)
    stale = Episode.objects.across_tenants("test").get(pk=pk)
    Episode.objects.across_tenants("test").filter(pk=pk).update(
        version=stale.version + 1
    )  # a search touched it
    moved = transitions.demote_to_warm(
        stale,
        WarmShape("s", ["p"], [], []),
        move=transitions.Move(now=NOW, actor="test"),
        reason="idle",
        source="test",
    )
    assert not moved and Episode.objects.across_tenants("test").get(pk=pk).layer == Layer.HOT
    assert not JournalEntry.objects.across_tenants("test").filter(episode_id=pk).exists()
    with pytest.raises(ValueError):
        transitions.write_if_unchanged(stale, Layer.HOT, layer=Layer.COLD)


def test_the_admin_shows_layer_and_state_read_only_and_moves_through_actions(admin_client, provided):
    tenant = provided.tenant
    pk = conversation(tenant, session="a", idle_days=0, topic=1, seed=5)
    url = f"/admin/episodes/episode/{pk}/change/"
    page = admin_client.get(url).content.decode()
    assert 'name="layer"' not in page and 'name="state"' not in page and 'name="anchor"' not in page

    # A forged form that names the layer changes nothing.
    admin_client.post(url, {"layer": "cold", "state": "dormant", "title": "renamed"})
    episode = Episode.objects.across_tenants("test").get(pk=pk)
    assert (episode.layer, episode.state) == (Layer.HOT, "active")

    changelist = "/admin/episodes/episode/"
    response = admin_client.post(changelist, {"action": "pack_warm", "_selected_action": [pk]})
    assert response.status_code == 302
    assert Episode.objects.across_tenants("test").get(pk=pk).layer == Layer.WARM
    admin_client.post(changelist, {"action": "unpack", "_selected_action": [pk]})
    assert Episode.objects.across_tenants("test").get(pk=pk).layer == Layer.HOT
    actions = list(
        JournalEntry.objects.across_tenants("test")
        .filter(episode_id=pk)
        .order_by("pk")
        .values_list("action", "actor")
    )
    assert actions == [("hot_to_warm", "admin:op"), ("unpack", "admin:op")]
    assert_consistent(tenant)
    listing = admin_client.get(changelist).content.decode()
    assert "activity" in listing and "priority" in listing
