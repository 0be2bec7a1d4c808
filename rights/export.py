"""A tenant's memory as JSON lines (``records``), streamed: one batch of episodes and their turns
in memory at a time, whatever the tenant's size."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, TypedDict

import redis
from django.db.models import QuerySet
from typing_extensions import Doc

from episodes.models import Episode, Link, Turn
from lifecycle.journal import to_json
from lifecycle.models import AccessWindow, JournalEntry, policy_row
from lifecycle.policy_json import PolicySerializer  # the policy's JSON shape, secrets left out
from memory_platform import counters
from memory_platform.embeddings import embedder_for
from memory_platform.tenancy.models import Tenant

from . import records


class ExportEmbedding(TypedDict):
    model: str
    dim: int
    encoding: Annotated[str, Doc("how each vector is written: base64 of little-endian float32")]


class ExportHeader(TypedDict):
    """An export's first line: what it is, whose, and how its vectors are written. (The lines after
    it: the policy, each episode followed by its turns, links, journal entries, counters, and an
    end record with the counts.)"""

    type: Literal["header"]
    format: str
    version: int
    exported_at: str
    tenant: str
    embedding: ExportEmbedding
    filters: Annotated[dict[str, Any], Doc("the export's filters, as given")]


#: Called with (episodes written, episodes to write) after each batch.
Progress = Callable[[int, int], None]
BATCH = 200


@dataclass(frozen=True)
class ExportFilter:
    """Which episodes an export holds: a user's, a session's, those that overlap a time range
    (whole episodes: one that began before ``since`` and went on after it is in)."""

    user_id: str | None = None
    session_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    @property
    def everything(self) -> bool:
        return not any(asdict(self).values())

    def episodes(self, tenant: Tenant) -> QuerySet[Episode]:
        qs = Episode.objects.filter(tenant=tenant)
        if self.user_id is not None:
            qs = qs.filter(user_id=self.user_id)
        if self.session_id is not None:
            qs = qs.filter(session_id=self.session_id)
        if self.since is not None:
            qs = qs.filter(last_occurred_at__gte=self.since)
        if self.until is not None:
            qs = qs.filter(first_occurred_at__lt=self.until)
        return qs

    def as_json(self) -> dict[str, Any]:
        return {k: to_json(v) for k, v in asdict(self).items() if v is not None}


def _line(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def export_lines(
    *, tenant: Tenant, filters: ExportFilter, now: datetime, progress: Progress | None = None
) -> Iterator[str]:
    """The tenant's memory in the export format, a line at a time (every query names the tenant)."""
    dim = tenant.embedding_dim
    header: ExportHeader = {
        "type": "header",
        "format": records.FORMAT,
        "version": records.VERSION,
        "exported_at": to_json(now),
        "tenant": tenant.name,
        "embedding": {"model": embedder_for(tenant).model_id, "dim": dim, "encoding": records.ENCODING},
        "filters": filters.as_json(),
    }
    yield _line(header)
    counts: Counter[str] = Counter()
    yield _line({"type": "policy", "policy": dict(PolicySerializer(policy_row(tenant)).data)})
    counts["policy"] += 1

    ids = list(filters.episodes(tenant).order_by("pk").values_list("pk", "public_id"))
    public = dict(ids)
    for start in range(0, len(ids), BATCH):
        batch = [pk for pk, _ in ids[start : start + BATCH]]
        windows = {w.episode_id: w for w in AccessWindow.objects.filter(tenant=tenant, episode_id__in=batch)}
        turns: dict[int, list[Turn]] = defaultdict(list)
        for turn in Turn.objects.filter(tenant=tenant, episode_id__in=batch).order_by(
            "episode_id", "seq", "id"
        ):
            turns[turn.episode_id].append(turn)
        for episode in Episode.objects.filter(tenant=tenant, pk__in=batch).order_by("pk"):
            yield _line(records.episode_record(episode, dim, windows.get(episode.pk)))
            counts["episode"] += 1
            for turn in turns[episode.pk]:
                yield _line(records.turn_record(turn, episode.public_id, dim))
                counts["turn"] += 1
        if progress is not None:
            progress(min(start + BATCH, len(ids)), len(ids))

    links = Link.objects.filter(tenant=tenant).order_by("pk")
    if not filters.everything:
        links = links.filter(src_id__in=list(public), dst_id__in=list(public))
    for src, dst, kind, created_at in links.values_list("src_id", "dst_id", "kind", "created_at").iterator():
        yield _line(
            {
                "type": "link",
                "src": public[src],
                "dst": public[dst],
                "kind": kind,
                "created_at": to_json(created_at),
            }
        )
        counts["link"] += 1

    entries = JournalEntry.objects.filter(tenant=tenant).order_by("pk")
    if not filters.everything:
        entries = entries.filter(episode_id__in=list(public))
    for entry in entries.iterator(chunk_size=1000):
        yield _line(
            records.journal_record_of(entry, public.get(entry.episode_id) if entry.episode_id else None)
        )
        counts["journal"] += 1

    if filters.everything:
        try:
            fields = counters.fields_of(tenant.pk)
        except (redis.RedisError, OSError):
            fields = {}  # counting fails open; so does carrying the counts
        yield _line({"type": "counters", "fields": fields})
        counts["counters"] += 1
    yield _line({"type": "end", "counts": dict(counts)})
