"""Pinned memories count against the hot quota: a tenant's anchors have a cap of their own inside
it (``hot_pinned_share`` of ``hot_quota_bytes``), every way to pin is refused past it with nothing
written, and the hot tier stays within ``hot_quota_bytes``
(docs/decisions/0038-pinned-memories-within-the-hot-quota.md)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from episodes.models import Episode, Layer, Link, State, Turn, turn_hot_bytes
from episodes.stores import keys
from episodes.stores.hot import hot_store
from lifecycle.models import JournalEntry, PolicyChange, policy_row
from lifecycle.quota import hot_bytes, pinned_bytes
from lifecycle.rollback import RollbackError, rollback_journal_entry
from lifecycle.services import episode_pack
from tests.conftest import Caller, pk, unit_vectors

from .factories import set_policy
from .rights import ADMIN, export, import_

pytestmark = pytest.mark.django_db(transaction=True)

QUOTA = 1_000_000
BIG = 31_000  # characters: one pinned memory weighs 31,000 + a 384-d float32 vector = 32,536 bytes
WEIGHT = turn_hot_bytes("x" * BIG)


def _text(label: str) -> str:
    return (f"{label} " + "lorem ipsum dolor sit amet " * (BIG // 27 + 1))[:BIG]


def _memory(caller: Caller, label: str, vector, *, anchor: bool):
    return caller.post(
        "/api/v1/memories", {"text": _text(label), "anchor": anchor, "vector": vector.tolist()}
    )


def _held(tenant) -> tuple[int, int, int, int]:
    """What a refused write must leave as it was: episodes, turns, journal entries, Redis documents."""
    return (
        Episode.objects.across_tenants("test").filter(tenant=tenant).count(),
        Turn.objects.across_tenants("test").filter(tenant=tenant).count(),
        JournalEntry.objects.across_tenants("test").filter(tenant=tenant).count(),
        hot_store().count(tenant.id.hex),
    )


def _refused(response, *, pinned: int, adding: int, cap: int) -> None:
    assert response.status_code == 409, response.content
    error = response.json()["error"]
    assert error["code"] == "over_quota"
    assert error["details"] == {
        "cap": "hot_pinned_share",
        "cap_bytes": cap,
        "pinned_bytes": pinned,
        "adding_bytes": adding,
        "hot_pinned_share": 0.25,
        "hot_quota_bytes": QUOTA,
    }
    assert f"{pinned} bytes are pinned now and this adds {adding}" in error["message"]


def test_pinned_memories_stop_at_their_cap_and_the_hot_tier_stays_within_its_quota(db):
    """60 pinned memories of 31 KB against a 1 MB quota (the hot tier reached 1.95 MB before)."""
    attacker = Caller("pinner", embedder="provided")
    outsider = Caller("outsider", embedder="provided")
    set_policy(attacker.tenant, hot_quota_bytes=QUOTA)
    set_policy(outsider.tenant, hot_quota_bytes=QUOTA)
    cap = policy_row(attacker.tenant).pinned_cap_bytes
    assert cap == 250_000
    vectors = unit_vectors(80, seed=41)
    mine = _memory(outsider, "outsider's own", vectors[79], anchor=True)
    assert mine.status_code == 201

    accepted = refused = 0
    for i in range(60):
        before = _held(attacker.tenant)
        response = _memory(attacker, f"pin {i}", vectors[i], anchor=True)
        if response.status_code == 201:
            accepted += 1
        else:
            _refused(response, pinned=accepted * WEIGHT, adding=WEIGHT, cap=cap)
            assert _held(attacker.tenant) == before  # nothing written, in Postgres or Redis
            refused += 1
        # Ordinary writes go on beside the pins; unpinned episodes make room as before.
        if i % 10 == 0:
            assert _memory(attacker, f"plain {i}", vectors[60 + i // 10], anchor=False).status_code == 201
        assert pinned_bytes(attacker.tenant.pk) <= cap
        assert hot_bytes(attacker.tenant) <= QUOTA
    assert accepted == cap // WEIGHT == 7 and refused == 53
    hot = set(
        Episode.objects.across_tenants("test")
        .filter(tenant=attacker.tenant, layer=Layer.HOT)
        .values_list("pk", flat=True)
    )
    assert hot_store().episode_ids(attacker.tenant.id.hex) == hot

    # The other tenant's pins are its own: the same cap, none of it taken by the first tenant.
    assert pinned_bytes(outsider.tenant.pk) == turn_hot_bytes(_text("outsider's own"))
    for i in range(6):
        assert _memory(outsider, f"theirs {i}", vectors[70 + i], anchor=True).status_code == 201
    assert Episode.objects.across_tenants("test").filter(tenant=outsider.tenant, anchor=True).count() == 7
    assert pinned_bytes(attacker.tenant.pk) == accepted * WEIGHT  # unchanged by the outsider's pins


def test_the_pin_endpoint_is_refused_the_same_way_also_for_a_cold_episode(db):
    caller = Caller("pin-endpoint", embedder="provided")
    set_policy(caller.tenant, hot_quota_bytes=QUOTA)
    cap = policy_row(caller.tenant).pinned_cap_bytes
    vectors = unit_vectors(9, seed=42)
    ids = [_memory(caller, f"fact {i}", vectors[i], anchor=False).json()["id"] for i in range(9)]
    for episode_id in ids[:7]:
        assert caller.post(f"/api/v1/memories/{episode_id}/anchor").status_code == 200
    before = _held(caller.tenant)
    _refused(caller.post(f"/api/v1/memories/{ids[7]}/anchor"), pinned=7 * WEIGHT, adding=WEIGHT, cap=cap)
    assert _held(caller.tenant) == before
    assert Episode.objects.across_tenants("test").get(public_id=ids[7]).anchor is False
    document = hot_store().client.hgetall(keys.episode_key(caller.tenant.id.hex, pk(ids[7])))
    assert document[b"anchor"] == b"0"

    # A cold episode pinned would come back to hot: refused before it moves.
    now = timezone.now()
    episode_pack(tenant=caller.tenant, episode_id=pk(ids[8]), layer="cold", now=now, actor="test")
    before = _held(caller.tenant)
    response = caller.post(f"/api/v1/memories/{ids[8]}/anchor")
    _refused(response, pinned=7 * WEIGHT, adding=WEIGHT, cap=cap)
    assert _held(caller.tenant) == before
    cold = Episode.objects.across_tenants("test").get(public_id=ids[8])
    assert (cold.layer, cold.anchor) == (Layer.COLD, False)

    # Unpinning makes room again.
    assert caller.delete(f"/api/v1/memories/{ids[0]}/anchor").status_code == 200
    assert caller.post(f"/api/v1/memories/{ids[8]}/anchor").json()["layer"] == Layer.HOT
    assert pinned_bytes(caller.tenant.pk) == 7 * WEIGHT


def test_restoring_and_rolling_back_to_a_pin_are_refused_past_the_cap(db):
    caller = Caller("restorer", embedder="provided")
    set_policy(caller.tenant, hot_quota_bytes=QUOTA)
    cap = policy_row(caller.tenant).pinned_cap_bytes
    vectors = unit_vectors(9, seed=43)
    forgotten = _memory(caller, "forgotten pin", vectors[0], anchor=True).json()["id"]
    unpinned = _memory(caller, "unpinned pin", vectors[1], anchor=True).json()["id"]
    assert caller.delete(f"/api/v1/memories/{forgotten}").status_code == 200
    assert caller.delete(f"/api/v1/memories/{unpinned}/anchor").status_code == 200
    for i in range(7):
        assert _memory(caller, f"pin {i}", vectors[2 + i], anchor=True).status_code == 201

    before = _held(caller.tenant)
    _refused(caller.post(f"/api/v1/memories/{forgotten}/restore"), pinned=7 * WEIGHT, adding=WEIGHT, cap=cap)
    assert _held(caller.tenant) == before
    assert Episode.objects.across_tenants("test").get(public_id=forgotten).state == State.FORGOTTEN

    unpin = JournalEntry.objects.across_tenants("test").get(episode__public_id=unpinned, action="anchor")
    with pytest.raises(RollbackError, match="past their cap"):
        rollback_journal_entry(unpin, now=timezone.now(), actor="test")
    assert _held(caller.tenant) == before
    unpin.refresh_from_db()
    assert (
        unpin.rolled_back_at is None
        and Episode.objects.across_tenants("test").get(public_id=unpinned).anchor is False
    )
    assert pinned_bytes(caller.tenant.pk) == 7 * WEIGHT <= cap


def test_an_import_carrying_pins_past_the_cap_is_refused_whole(db):
    source = Caller("export-source", scopes=ADMIN, embedder="provided")
    target = Caller("import-target", scopes=ADMIN, embedder="provided")
    vectors = unit_vectors(10, seed=44)
    for i in range(8):
        assert _memory(source, f"pin {i}", vectors[i], anchor=True).status_code == 201
    body = export(source)
    set_policy(target.tenant, hot_quota_bytes=QUOTA)
    cap = policy_row(target.tenant).pinned_cap_bytes
    assert _memory(target, "already pinned", vectors[9], anchor=True).status_code == 201
    before = (
        _held(target.tenant),
        PolicyChange.objects.across_tenants("test").filter(tenant=target.tenant).count(),
    )
    _refused(import_(target, body), pinned=WEIGHT, adding=8 * WEIGHT, cap=cap)
    assert (
        _held(target.tenant),
        PolicyChange.objects.across_tenants("test").filter(tenant=target.tenant).count(),
    ) == before

    set_policy(target.tenant, hot_pinned_share=1.0)  # room for all of them: the same import passes
    assert import_(target, body).status_code == 200
    assert pinned_bytes(target.tenant.pk) == 9 * WEIGHT
    assert hot_bytes(target.tenant) <= QUOTA


def test_a_pinned_conversation_takes_no_more_turns(db):
    caller = Caller("talker", embedder="provided")
    vector = unit_vectors(1, seed=45)[0].tolist()  # one vector: similarity never splits the session
    turns = [
        {"role": "user", "text": f"turn {i} about the garden", "session_id": "s", "vector": vector}
        for i in range(4)
    ]
    first = caller.post("/api/v1/turns", {"turns": turns[:2]}).json()["episode_ids"]
    assert len(first) == 1
    assert caller.post(f"/api/v1/memories/{first[0]}/anchor").status_code == 200
    weight = pinned_bytes(caller.tenant.pk)
    later = caller.post("/api/v1/turns", {"turns": turns[2:]}).json()["episode_ids"]
    assert later and first[0] not in later  # the session goes on in a new episode...
    assert (
        pinned_bytes(caller.tenant.pk)
        == weight
        == Episode.objects.across_tenants("test").get(public_id=first[0]).hot_bytes
    )
    assert (
        Link.objects.across_tenants("test")
        .filter(src__public_id=later[0], dst__public_id=first[0], kind="continues")
        .exists()
    )


def test_unpacking_a_pinned_episode_keeps_the_hot_tier_within_its_quota(db):
    caller = Caller("unpack-pin", embedder="provided")
    set_policy(caller.tenant, hot_quota_bytes=QUOTA)
    vectors = unit_vectors(40, seed=46)
    pinned = _memory(caller, "pinned", vectors[0], anchor=True).json()["id"]
    episode_pack(tenant=caller.tenant, episode_id=pk(pinned), layer="warm", now=timezone.now(), actor="test")
    for i in range(1, 40):  # unpinned, over the quota: the oldest leave
        assert _memory(caller, f"plain {i}", vectors[i], anchor=False).status_code == 201
    assert caller.post(f"/api/v1/memories/{pinned}/unpack").status_code == 200
    assert Episode.objects.across_tenants("test").get(public_id=pinned).layer == Layer.HOT
    assert hot_bytes(caller.tenant) <= QUOTA


def test_the_policy_refuses_a_cap_below_what_is_pinned_and_takes_one_above(db):
    operator = Caller("operator", scopes=ADMIN, embedder="provided")
    outsider = Caller("outsider", scopes=ADMIN, embedder="provided")
    set_policy(operator.tenant, hot_quota_bytes=QUOTA)
    vectors = unit_vectors(4, seed=47)
    for i in range(4):
        assert _memory(operator, f"pin {i}", vectors[i], anchor=True).status_code == 201
    assert operator.get("/api/v1/policy").json()["hot_pinned_share"] == 0.25

    for body in ({"hot_quota_bytes": 400_000}, {"hot_pinned_share": 0.1}):
        response = operator.client.patch("/api/v1/policy", body, format="json")
        assert response.status_code == 409, response.content
        message = response.json()["error"]["message"]
        assert f"below the {4 * WEIGHT} bytes this tenant has pinned" in message
    assert (
        operator.client.patch("/api/v1/policy", {"hot_pinned_share": 1.5}, format="json").status_code == 400
    )
    assert not PolicyChange.objects.across_tenants("test").filter(tenant=operator.tenant).exists()

    # Lower, but still above the pins; and the other tenant, which pins nothing, may go to zero.
    assert (
        operator.client.patch("/api/v1/policy", {"hot_pinned_share": 0.2}, format="json").status_code == 200
    )
    assert outsider.client.patch("/api/v1/policy", {"hot_pinned_share": 0}, format="json").status_code == 200
    assert _memory(outsider, "no pins here", vectors[0], anchor=True).status_code == 409


def test_the_console_refuses_the_same_pins_and_a_cap_below_them(admin_client):
    from tests.console.test_console_pages import form_data

    caller = Caller("console-pins", embedder="provided")
    set_policy(caller.tenant, hot_quota_bytes=QUOTA)
    vectors = unit_vectors(8, seed=48)
    ids = [pk(_memory(caller, f"fact {i}", vectors[i], anchor=i < 7).json()["id"]) for i in range(8)]
    before = _held(caller.tenant)
    page = admin_client.post(
        "/admin/episodes/episode/", {"action": "pin", "_selected_action": [ids[7]]}, follow=True
    ).content.decode()
    assert "past their cap of 250000 bytes" in page and "Pinned 0 episode(s)" in page
    assert (
        _held(caller.tenant) == before
        and Episode.objects.across_tenants("test").get(pk=ids[7]).anchor is False
    )

    policy = policy_row(caller.tenant)
    url = f"/admin/lifecycle/memorypolicy/{policy.pk}/change/"
    response = admin_client.post(url, form_data(policy, hot_pinned_share="0.1"))
    assert response.status_code == 200  # the form again, with the reason
    assert f"below the {7 * WEIGHT} bytes this tenant has pinned" in response.content.decode()
    assert policy_row(caller.tenant).hot_pinned_share == 0.25
    assert not PolicyChange.objects.across_tenants("test").filter(tenant=caller.tenant).exists()
