"""A scope means one thing in every store: the ORM filter and the SQL fragment select the same rows."""

from datetime import UTC, datetime, timedelta

import pytest

from episodes.models import Episode
from episodes.scope import Scope
from episodes.selectors import episodes_for
from episodes.stores.tables import EPISODES
from memory_platform import db

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _episode(tenant, n, **fields):
    at = T0 + timedelta(days=n)
    defaults = {"first_occurred_at": at, "last_occurred_at": at, "last_accessed_at": at}
    return Episode.objects.create(tenant=tenant, title=f"e{n}", **{**defaults, **fields}).pk


def test_orm_and_sql_translations_agree(caller, outsider):
    t = caller.tenant
    _episode(t, 0, user_id="alice", kind="fact", tags=["red", "blue"])
    _episode(t, 1, user_id="ALICE", kind="fact", tags=["red"])
    _episode(t, 2, user_id="bob", kind="note", layer="warm", state="dormant")
    _episode(t, 3, user_id="bob", kind="note", layer="cold", keywords=["red"], anchor=False)
    _episode(t, 4, session_id="s1", anchor=True, state="forgotten")
    _episode(outsider.tenant, 5, user_id="alice", kind="fact", tags=["red"])
    scopes = [
        Scope(),
        Scope(user_id="alice"),
        Scope(kinds=("fact",), tags=("red",)),
        Scope(tags=("red", "blue"), all_tags=True),
        Scope(tags=("red",)),  # a cold episode's keywords count as tags
        Scope(layers=("warm", "cold")),
        Scope(states=("dormant",)),
        Scope(states=("forgotten",)),
        Scope(anchor=True, states=("forgotten",)),
        Scope(occurred_from=T0 + timedelta(days=1), occurred_to=T0 + timedelta(days=2)),
        Scope(older_than=T0 + timedelta(days=2)),
    ]
    for scope in scopes:
        orm = set(episodes_for(t, scope).values_list("pk", flat=True))
        where, params = scope.sql("e")
        rows = db.fetch(
            f"SELECT e.id FROM {EPISODES} e WHERE e.tenant_id = %s AND {where}", [t.pk, *params], tenant=t
        )
        assert orm == {r[0] for r in rows}, scope
    by_user = episodes_for(t, Scope(user_id="alice")).values_list("title", flat=True)
    assert list(by_user) == ["e0"]  # exact: not ALICE, not the outsider's alice
    assert sorted(episodes_for(t, Scope(tags=("red",))).values_list("title", flat=True)) == ["e0", "e1", "e3"]
    assert not episodes_for(t, Scope()).filter(title="e4").exists()  # forgotten only when named
