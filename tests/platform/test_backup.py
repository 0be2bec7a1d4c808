"""`manage.py backup` dumps the system of record and restores it."""

import pytest
from django.core.management import call_command

from episodes.models import Episode

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_backup_restores_what_was_there(caller, tmp_path):
    kept = caller.post("/api/v1/memories", {"text": "the spare key is under the blue pot"}).json()["id"]
    dump = tmp_path / "memory.dump"
    call_command("backup", output=str(dump))
    assert dump.stat().st_size > 0

    Episode.objects.across_tenants("test").filter(public_id=kept).delete()
    call_command("backup", restore=str(dump))
    assert (
        Episode.objects.across_tenants("test").get(public_id=kept).search_text
        == "the spare key is under the blue pot"
    )
