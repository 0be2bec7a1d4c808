import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.conftest import pk

pytestmark = pytest.mark.django_db


def test_episode_changelist_has_no_n_plus_one(admin_client, caller):
    caller.post("/api/v1/memories", {"text": "one"})
    with CaptureQueriesContext(connection) as few:
        assert admin_client.get("/admin/episodes/episode/").status_code == 200
    for i in range(10):
        caller.post("/api/v1/memories", {"text": f"more {i}"})
    with CaptureQueriesContext(connection) as many:
        assert admin_client.get("/admin/episodes/episode/").status_code == 200
    assert len(many) == len(few)


def test_episode_change_page_and_turns_render(admin_client, caller):
    public_id = caller.post("/api/v1/memories", {"text": "remember the milk"}).json()["id"]
    # An operator finds the memory a user names by its public id, in either case.
    found = admin_client.get("/admin/episodes/episode/", {"q": public_id.lower()})
    assert (
        found.status_code == 200
        and f"/admin/episodes/episode/{pk(public_id)}/change/" in found.content.decode()
    )
    page = admin_client.get(f"/admin/episodes/episode/{pk(public_id)}/change/")
    assert page.status_code == 200
    assert b"remember the milk" in page.content and public_id.encode() in page.content
    assert admin_client.get("/admin/episodes/turn/").status_code == 200
    assert admin_client.get("/admin/tenancy/tenant/").status_code == 200
    assert admin_client.get("/admin/tenancy/apikey/").status_code == 200
