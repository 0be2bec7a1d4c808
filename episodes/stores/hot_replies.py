"""Reading RediSearch replies (``FT.SEARCH``, ``FT.AGGREGATE`` counts) in RESP2 or RESP3, raw:
only the fields a caller uses are decoded."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from memory_platform.redis_client import info_field


@dataclass
class HotHit:
    doc_id: str
    episode_id: int
    turn_id: int | None
    score: float
    #: The tier that found it (``retrieval.ranking.Match``).
    source: ClassVar[str] = "hot"
    #: The document's vector, when the query asked for it.
    vector: np.ndarray | None = field(default=None, repr=False, compare=False)


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def total(reply: Any) -> int:
    if isinstance(reply, dict):  # RESP3
        return int(info_field(reply, "total_results", 0))
    return int(reply[0])


def entries(reply: Any, with_scores: bool) -> Iterator[tuple[Any, Any, Any]]:
    """(key, score, fields map) of each result of an FT.SEARCH reply, raw: RESP3 (a map) or RESP2
    (a flat list; WITHSCORES puts the score after each key). Only the fields used are read later:
    decoding every field of every row cost more than Redis took to answer."""
    if reply is None:
        return
    if isinstance(reply, dict):
        for result in info_field(reply, "results") or []:
            yield (
                info_field(result, "id"),
                info_field(result, "score"),
                info_field(result, "extra_attributes") or {},
            )
        return
    items = reply[1:]
    step = 3 if with_scores else 2
    for i in range(0, len(items), step):
        values = items[i + step - 1]
        yield (
            items[i],
            items[i + 1] if with_scores else None,
            dict(zip(values[::2], values[1::2], strict=False)),
        )


def hits(reply: Any, *, distance: bool) -> list[HotHit]:
    """KNN replies carry a distance field; BM25 replies a score (WITHSCORES)."""
    hits = []
    for key, score, fields in entries(reply, with_scores=not distance):
        turn_id = info_field(fields, "turn_id")
        if distance:
            found = info_field(fields, "vector_distance")
            value = 1.0 - float(found) if found is not None else 0.0
        else:
            value = float(score or 0.0)
        raw = info_field(fields, "embedding")
        hits.append(
            HotHit(
                doc_id=text(key),
                episode_id=int(info_field(fields, "episode")),
                turn_id=int(turn_id) if turn_id else None,
                score=value,
                vector=np.frombuffer(raw, dtype=np.float32) if isinstance(raw, bytes) else None,
            )
        )
    return hits
