"""Deep unpacking (docs/concepts.md#unpacking): an episode restored whole and made hot again, as the
read path answers it. The move is ``lifecycle.transitions.promote``; unpacking also counts as a use."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, cast

from typing_extensions import Doc

from episodes import selectors
from episodes.models import Layer
from episodes.shapes import HotMemory
from episodes.stores import rows
from memory_platform.tenancy.models import Tenant

from .services import episode_unpack


class UnpackedMemory(HotMemory):
    """An unpacked memory: hot, whole, and the layer it left."""

    unpacked_from: Annotated[str, Layer, Doc("the layer it left (hot when it was hot already)")]


def unpack(
    *, tenant: Tenant, episode_id: int, now: datetime, actor: str = "api", record: bool = True
) -> UnpackedMemory:
    """Unpack and return the episode whole (``unpacked_from``: the layer it left). ``record``
    counts the unpack as an access (a search that unpacks its hits counts them itself).
    Raises EpisodeNotFound."""
    episode, previous = episode_unpack(tenant=tenant, episode_id=episode_id, now=now, actor=actor)
    if record:
        rows.uses_add({(tenant.pk, episode.pk): rows.Use(accesses=1, traversals=0, at=now)})
        episode.refresh_from_db()
    body = cast(HotMemory, selectors.episode_detail(tenant=tenant, episode=episode, deep=True))  # hot now
    return {**body, "unpacked_from": previous}
