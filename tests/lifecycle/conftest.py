"""Fixtures of the lifecycle tests."""

from __future__ import annotations

import pytest

from tests.conftest import Caller

from .rights import ADMIN, build


@pytest.fixture
def source(db) -> Caller:
    caller = Caller("source", scopes=ADMIN)
    caller.ids = build(caller.tenant)  # type: ignore[attr-defined]
    return caller


@pytest.fixture
def target(db) -> Caller:
    return Caller("target", scopes=ADMIN)
