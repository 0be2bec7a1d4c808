"""A read key never changes data: its deep reads show packed memories whole where they are
(hardening finding 5: they unpacked them to hot, re-embedding them)."""

import pytest

from episodes.models import Episode
from lifecycle.models import JournalEntry

from ..conftest import Caller
from .test_search import pack, turns

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def reader(caller):
    """A read-only key of the same tenant."""
    return Caller("reader", scopes=("read",), tenant=caller.tenant)


def test_a_read_key_reads_deep_without_moving_anything(caller, reader):
    episode_id = turns(caller, "s1", ["the harbour lights were green", "and the ferry left at nine"])[
        "episode_ids"
    ][0]
    pack(episode_id, "cold")
    before = Episode.objects.across_tenants("test").values("layer", "version").get(public_id=episode_id)

    body = reader.get(f"/api/v1/memories/{episode_id}", {"depth": "deep"}).json()
    assert body["layer"] == "cold" and body["index_only"] is False
    assert [t["text"] for t in body["turns"]] == [
        "the harbour lights were green",
        "and the ferry left at nine",
    ]

    hits = reader.post(
        "/api/v1/search", {"query": "harbour lights ferry", "depth": "deep", "view": "full"}
    ).json()["results"]
    hit = next(h for h in hits if h["episode_id"] == episode_id)
    assert hit["layer"] == "cold" and len(hit["turns"]) == 2

    assert reader.post(f"/api/v1/memories/{episode_id}/unpack").status_code == 403
    after = Episode.objects.across_tenants("test").values("layer", "version").get(public_id=episode_id)
    assert after["layer"] == before["layer"] == "cold"
    assert not JournalEntry.objects.across_tenants("test").filter(episode__public_id=episode_id).exists()

    # A write key's deep read unpacks, as documented.
    assert caller.get(f"/api/v1/memories/{episode_id}", {"depth": "deep"}).json()["unpacked_from"] == "cold"
    assert Episode.objects.across_tenants("test").get(public_id=episode_id).layer == "hot"
