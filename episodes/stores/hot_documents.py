"""What the hot index holds for an episode: one document per turn (its window text, language,
vector and the episode's tags) and one for the episode, each with a signature of its content, so
that ``HotStore.index_episode`` writes only the documents that changed (docs/decisions/0033)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import language
from . import keys

#: The field of a document that signs what ``HotStore.index_episode`` wrote into it (not indexed).
SIGNATURE = "sig"


@dataclass(frozen=True)
class TurnDoc:
    """What the hot index holds for one turn: its searchable text and vector (the caller decides
    them: the turn with its neighbours as full text reads them, see ``indexing.turn_documents``)."""

    turn: Any
    text: str
    vector: np.ndarray


def epoch(value: Any) -> float:
    return float(value.timestamp())


def vector_bytes(vector: np.ndarray | Sequence[float]) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def episode_documents(episode: Any, docs: Iterable[TurnDoc]) -> dict[str, dict[str, Any]]:
    """The fields of the episode's documents, by key: its turns', and its own when it has an
    embedding."""
    tenant_hex = episode.tenant_id.hex
    base: dict[str, Any] = {
        "tenant": tenant_hex,
        "user_id": keys.exact(episode.user_id),
        "agent_id": keys.exact(episode.agent_id),
        "session_id": keys.exact(episode.session_id),
        "kind": keys.exact(episode.kind),
        "layer": "hot",
        "state": episode.state,
        "episode": str(episode.pk),
        "anchor": "1" if episode.anchor else "0",
        "tags": ",".join(keys.exact(tag) for tag in episode.tags),
    }
    documents: dict[str, dict[str, Any]] = {}
    for doc in docs:
        documents[keys.turn_key(tenant_hex, doc.turn.pk)] = {
            **base,
            "doctype": keys.DOC_TURN,
            "role": doc.turn.role,
            "text": language.hot_text(doc.text),
            "language": language.REDISEARCH[doc.turn.language],
            "occurred_at": epoch(doc.turn.occurred_at),
            "turn_id": str(doc.turn.pk),
            "seq": str(doc.turn.seq),
            "embedding": vector_bytes(doc.vector),
        }
    if episode.embedding is not None:
        # The episode document lists the episode (which hot episodes the index holds); it
        # carries no text and no vector, so search (over turns) never scans it.
        documents[keys.episode_key(tenant_hex, episode.pk)] = {
            **base,
            "doctype": keys.DOC_EPISODE,
            "role": "",
            "occurred_at": epoch(episode.last_occurred_at),
        }
    return documents


def signature_of(fields: dict[str, Any]) -> str:
    """A digest of a document's fields, names and values, whatever their order."""
    digest = hashlib.blake2b(digest_size=12)
    for name in sorted(fields):
        value = fields[name]
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(value if isinstance(value, bytes) else str(value).encode())
        digest.update(b"\0")
    return digest.hexdigest()
