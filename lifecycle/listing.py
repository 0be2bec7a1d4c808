"""The tenant's visible episodes as one tick reads them: once, as plain columns, scored at once
(docs/decisions/0056-tick-at-scale.md).

Every step of a tick looks at every episode (which ones leave hot, which go cold, which change
state, which may merge); only the few that change are read whole, as model instances, at the
version the decision was made on. The steps keep the listing true as they write
(``Listing.moved``), and an episode found touched by someone else is read again
(``Listing.refresh``), so a later step decides on what a fresh listing would show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from episodes.models import Episode, Layer, State
from episodes.selectors import tenant_degrees
from episodes.stores.tables import EPISODES
from memory_platform import db
from memory_platform.tenancy.models import Tenant

from . import scoring
from .tenant_policy import Policy

_MISSING = int(scoring.MISSING)


def micros_of(column: str) -> str:
    """A timestamptz column as integer microseconds since the epoch (EXTRACT gives an exact numeric)."""
    return f"COALESCE((EXTRACT(EPOCH FROM {column}) * 1000000)::bigint, {_MISSING})"


#: The columns the steps decide on. Through ``values_list`` each of a million rows' five times would
#: become a datetime, and through model instances a whole object: most of a tick's time at 100k
#: episodes. The order is the model's (newest first), so the steps change episodes in the order
#: they always did. Key points are counted for warm episodes only, the only ones the gradient
#: shortens: a packed row's key points are mostly in TOAST, and counting every packed episode's
#: read four more pages each (4 of a tenant of 1,000's 10 ms).
_SELECT = f"""
SELECT id, version, layer, state, anchor,
       CASE WHEN layer = %s THEN user_id ELSE '' END,
       CASE WHEN layer = %s THEN agent_id ELSE '' END,
       CASE WHEN layer = %s THEN session_id ELSE '' END,
       hot_bytes, CASE WHEN layer = %s THEN cardinality(key_points) ELSE 0 END, access_count, traverse_count,
       {micros_of("created_at")}, {micros_of("first_occurred_at")}, {micros_of("last_accessed_at")}, {micros_of("last_linked_at")},
       COALESCE(stability, 'NaN'), COALESCE(difficulty, 'NaN'), {micros_of("last_review_at")}
FROM {EPISODES}
WHERE tenant_id = %s AND state <> %s
ORDER BY last_occurred_at DESC, id DESC
"""
_CHUNK = 50_000


@dataclass
class Listing:
    """One row per visible episode (``ids[i]``), its columns as arrays; ``scores`` its activity score."""

    ids: np.ndarray
    version: np.ndarray
    layer: np.ndarray
    state: np.ndarray
    session: list[tuple[str, str, str]]  # (user, agent, session) of a hot episode; blanks otherwise
    hot_bytes: np.ndarray
    key_points: np.ndarray
    stats: scoring.StatsColumns
    scores: np.ndarray
    visible: np.ndarray
    position: dict[int, int]

    @classmethod
    def read(cls, tenant: Tenant, policy: Policy, now: datetime) -> Listing:
        columns: list[list[Any]] = [[] for _ in range(19)]
        with db.cursor(tenant) as cursor:
            cursor.execute(_SELECT, [Layer.HOT, Layer.HOT, Layer.HOT, Layer.WARM, tenant.pk, State.FORGOTTEN])
            while chunk := cursor.fetchmany(_CHUNK):
                for column, values in zip(columns, zip(*chunk, strict=True), strict=True):
                    column.extend(values)
        ints = {k: np.asarray(columns[k], dtype=np.int64) for k in (0, 1, 8, 9, 10, 11, 12, 13, 14, 15, 18)}
        floats = [np.asarray(c, dtype=np.float64) for c in columns[16:18]]
        ids = ints[0]
        degree = tenant_degrees(tenant)
        stats = scoring.StatsColumns(
            created_at=ints[12],
            first_occurred_at=ints[13],
            in_degree=np.asarray([degree.get(pk, (0, 0))[0] for pk in columns[0]], dtype=np.int64),
            out_degree=np.asarray([degree.get(pk, (0, 0))[1] for pk in columns[0]], dtype=np.int64),
            access_count=ints[10],
            traverse_count=ints[11],
            last_accessed_at=ints[14],
            last_linked_at=ints[15],
            anchor=np.asarray(columns[4], dtype=bool),
            stability=floats[0],
            difficulty=floats[1],
            last_review_at=ints[18],
        )
        return cls(
            ids=ids,
            version=ints[1],
            layer=np.asarray(columns[2], dtype=object),
            state=np.asarray(columns[3], dtype=object),
            session=list(zip(columns[5], columns[6], columns[7], strict=True)),
            hot_bytes=ints[8],
            key_points=ints[9],
            stats=stats,
            scores=scoring.activity_scores(stats, policy, now),
            visible=np.ones(ids.size, dtype=bool),
            position={pk: i for i, pk in enumerate(columns[0])},
        )

    def __len__(self) -> int:
        return int(self.visible.sum())

    @property
    def anchor(self) -> np.ndarray:
        return self.stats.anchor

    def rows(self, *, layer: str | None = None, anchor: bool | None = None) -> np.ndarray:
        """Positions of the visible episodes (in a layer, anchors or not), newest first."""
        mask = self.visible.copy()
        if layer is not None:
            mask &= self.layer == layer
        if anchor is not None:
            mask &= self.anchor == anchor
        return np.flatnonzero(mask)

    def row_of(self, episode_id: int) -> int | None:
        i = self.position.get(episode_id)
        return i if i is not None and self.visible[i] else None

    def rows_of(self, episode_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``row_of`` for many at once: their positions (0 where not listed) and which are listed
        and visible."""
        if not self.ids.size:
            return np.zeros(episode_ids.size, dtype=np.int64), np.zeros(episode_ids.size, dtype=bool)
        order = np.argsort(self.ids, kind="stable")
        found = np.minimum(np.searchsorted(self.ids, episode_ids, sorter=order), self.ids.size - 1)
        at = order[found]
        listed = (self.ids[at] == episode_ids) & self.visible[at]
        return np.where(listed, at, 0), listed

    def moved(self, episode: Episode) -> None:
        """This tick wrote ``episode`` (its instance holds what it wrote): its version, layer,
        state and key points; its scores do not change (nothing they read was written)."""
        i = self.position.get(episode.pk)
        if i is None:
            return
        self.version[i] = episode.version
        self.layer[i] = episode.layer
        self.state[i] = episode.state
        if "key_points" in episode.__dict__:
            self.key_points[i] = len(episode.key_points)
        if episode.layer == Layer.HOT:
            self.session[i] = (episode.user_id, episode.agent_id, episode.session_id)

    def refresh(self, episode: Episode | None, episode_id: int, policy: Policy, now: datetime) -> None:
        """Someone else touched the episode since it was listed: take its row as it is now (a
        forgotten or deleted one leaves the listing), rescored."""
        i = self.position.get(episode_id)
        if i is None:
            return
        if episode is None or episode.state == State.FORGOTTEN:
            self.visible[i] = False
            return
        self.moved(episode)
        s = self.stats
        s.created_at[i] = scoring.micros(episode.created_at)
        s.first_occurred_at[i] = scoring.micros(episode.first_occurred_at)
        s.access_count[i] = episode.access_count
        s.traverse_count[i] = episode.traverse_count
        s.last_accessed_at[i] = scoring.micros(episode.last_accessed_at)
        linked, reviewed = episode.last_linked_at, episode.last_review_at
        s.last_linked_at[i] = _MISSING if linked is None else scoring.micros(linked)
        s.last_review_at[i] = _MISSING if reviewed is None else scoring.micros(reviewed)
        s.anchor[i] = episode.anchor
        s.stability[i] = math.nan if episode.stability is None else episode.stability
        s.difficulty[i] = math.nan if episode.difficulty is None else episode.difficulty
        self.hot_bytes[i] = episode.hot_bytes
        self.scores[i] = scoring.activity_score(s.row(i), policy, now)
