"""Reads: episodes in the shape of their layer (seed 001 anisotropy)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, QuerySet

from memory_platform.tenancy.models import Tenant

from .models import Episode, Layer, Link, State


def episodes_for(tenant: Tenant) -> QuerySet[Episode]:
    return Episode.objects.for_tenant(tenant).visible()


def episode_get(*, tenant: Tenant, episode_id: int) -> Episode | None:
    return episodes_for(tenant).filter(pk=episode_id).first()


@dataclass(frozen=True)
class EpisodeFilters:
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    kind: str | None = None
    layer: str | None = None
    state: str | None = None
    anchor: bool | None = None
    tag: str | None = None


def encode_cursor(episode_id: int) -> str:
    return base64.urlsafe_b64encode(f"e:{episode_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    padded = cursor + "=" * (-len(cursor) % 4)
    try:
        raw = base64.urlsafe_b64decode(padded.encode()).decode()
        prefix, _, value = raw.partition(":")
        if prefix != "e":
            raise ValueError(cursor)
        return int(value)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("invalid cursor") from None


def episode_list(
    *, tenant: Tenant, filters: EpisodeFilters, cursor: str | None, limit: int
) -> tuple[list[Episode], str | None]:
    qs = Episode.objects.for_tenant(tenant)
    if filters.state == State.FORGOTTEN:
        qs = qs.filter(state=State.FORGOTTEN)
    else:
        qs = qs.visible()
        if filters.state:
            qs = qs.filter(state=filters.state)
    for name in ("user_id", "agent_id", "session_id", "kind", "layer"):
        value = getattr(filters, name)
        if value is not None:
            qs = qs.filter(**{name: value})
    if filters.anchor is not None:
        qs = qs.filter(anchor=filters.anchor)
    if filters.tag:
        qs = qs.filter(tags__contains=[filters.tag])
    if cursor:
        qs = qs.filter(pk__lt=decode_cursor(cursor))
    page = list(qs.order_by("-pk")[: limit + 1])
    next_cursor = encode_cursor(page[limit - 1].pk) if len(page) > limit else None
    return page[:limit], next_cursor


def degrees(episode_ids: list[int]) -> dict[int, tuple[int, int]]:
    """(in_degree, out_degree) per episode, derived from links, never stored."""
    result = {e: (0, 0) for e in episode_ids}
    rows = (
        Episode.objects.filter(pk__in=episode_ids)
        .annotate(
            in_deg=Count("in_links", distinct=True, filter=Q(in_links__src__state__in=_LIVE)),
            out_deg=Count("out_links", distinct=True, filter=Q(out_links__dst__state__in=_LIVE)),
        )
        .values_list("pk", "in_deg", "out_deg")
    )
    for pk, in_deg, out_deg in rows:
        result[pk] = (in_deg, out_deg)
    return result


_LIVE = [State.ACTIVE, State.DORMANT, State.DELETE_CANDIDATE]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def episode_summary_shape(episode: Episode, degree: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """The fields every shape shares."""
    return {
        "id": episode.pk,
        "kind": episode.kind,
        "title": episode.title,
        "layer": episode.layer,
        "state": episode.state,
        "anchor": episode.anchor,
        "tags": episode.tags,
        "metadata": episode.metadata,
        "scope": {"user_id": episode.user_id, "agent_id": episode.agent_id, "session_id": episode.session_id},
        "first_occurred_at": _iso(episode.first_occurred_at),
        "last_occurred_at": _iso(episode.last_occurred_at),
        "turn_count": episode.turn_count,
        "counters": {
            "access_count": episode.access_count,
            "traverse_count": episode.traverse_count,
            "in_degree": degree[0],
            "out_degree": degree[1],
            "last_accessed_at": _iso(episode.last_accessed_at),
            "last_linked_at": _iso(episode.last_linked_at),
        },
        "restored_at": _iso(episode.restored_at),
        "forgotten_at": _iso(episode.forgotten_at),
    }


def turn_shape(turn: Any) -> dict[str, Any]:
    return {
        "id": turn.pk,
        "seq": turn.seq,
        "role": turn.role,
        "text": turn.text,
        "occurred_at": _iso(turn.occurred_at),
        "metadata": turn.metadata,
    }


def episode_shape(episode: Episode, *, deep: bool = False, with_links: bool = True) -> dict[str, Any]:
    """Hot: full turns. Warm: summary and key points (partial). Cold: headline and tags (index only).
    ``deep`` returns every turn whatever the layer."""
    degree = degrees([episode.pk])[episode.pk]
    body = episode_summary_shape(episode, degree)
    body["entities"] = episode.entities
    body["decisions"] = episode.decisions
    if episode.layer == Layer.HOT or deep:
        body["turns"] = [turn_shape(t) for t in episode.turns.order_by("seq", "id")]
    if episode.layer == Layer.WARM:
        body.update(summary=episode.summary, key_points=episode.key_points, partial=not deep)
    elif episode.layer == Layer.COLD:
        body.update(headline=episode.headline, tags=_cold_tags(episode), index_only=not deep)
    if with_links:
        out_links = Link.objects.filter(src=episode).values_list("dst_id", "kind")
        in_links = Link.objects.filter(dst=episode).values_list("src_id", "kind")
        body["links"] = {
            "out": [{"episode_id": d, "kind": k} for d, k in out_links],
            "in": [{"episode_id": s, "kind": k} for s, k in in_links],
        }
    return body


def _cold_tags(episode: Episode) -> list[str]:
    return list(dict.fromkeys(list(episode.tags) + list(episode.keywords)))
