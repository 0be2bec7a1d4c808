"""The answer of ``POST /forget`` by filter, declared once (``memory_platform.api.answers``); an
erasure's answers are ``rights.erasure``'s, an import's ``rights.imports``'."""

from __future__ import annotations

from typing import Annotated, TypedDict

from typing_extensions import Doc


class SoftForgotten(TypedDict):
    """``POST /forget`` by filter: the memories forgotten (restorable), or that would be (dry_run)."""

    dry_run: bool
    count: int
    ids: Annotated[list[str], Doc("the memories' ids")]
