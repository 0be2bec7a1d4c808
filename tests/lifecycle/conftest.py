"""Fixtures of the lifecycle tests."""

from __future__ import annotations

import pytest

from tests.conftest import Caller

from .factories import IDLE_DAYS, conversation, memory
from .rights import ADMIN, build


@pytest.fixture
def source(db) -> Caller:
    caller = Caller("source", scopes=ADMIN)
    caller.ids = build(caller.tenant)  # type: ignore[attr-defined]
    return caller


@pytest.fixture
def target(db) -> Caller:
    return Caller("target", scopes=ADMIN)


@pytest.fixture
def ages(provided):
    """One conversation per idle age (``IDLE_DAYS``), each in its own session, plus an old anchor."""
    tenant = provided.tenant
    ids = {
        days: conversation(tenant, session=f"s{days}", idle_days=days, topic=i, seed=10 * i)
        for i, days in enumerate(IDLE_DAYS)
    }
    ids["anchor"] = memory(
        tenant, text="Always answer in French, the user is Camille.", idle_days=400, anchor=True, seed=99
    )
    return ids
