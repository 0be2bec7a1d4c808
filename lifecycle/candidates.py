"""Merge and delete candidates (seed 002): proposed by the tick, decided by an operator.

Nothing here merges or deletes by itself. Approving is soft and journaled: a delete forgets the
episode (restorable for `purge_grace_days`), a merge links the episode `merged_into` the survivor
and forgets it. Both can be rolled back from the journal.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Q

from episodes.models import Episode, Layer, Link, LinkKind
from episodes.selectors import degrees
from episodes.services import EpisodeNotFound
from episodes.stores import rows
from memory_platform.tenancy.models import Tenant

from . import scoring
from .forgetting import forget_journaled
from .journal import journal_record
from .models import Candidate

if TYPE_CHECKING:
    from .tick_context import Tick

#: Merge detection looks at this many of the lowest-scoring episodes per tick (one KNN query each,
#: batched in one statement) and this many nearest neighbours of each.
MERGE_SCAN_LIMIT = 2_000
MERGE_NEIGHBOURS = 3


class CandidateError(Exception):
    """The candidate cannot be decided (already decided, its episodes gone or forgotten)."""


def propose_delete(tenant: Tenant, episode: Episode, score: float, now: datetime) -> int:
    candidate, _ = Candidate.objects.get_or_create(
        tenant=tenant,
        kind=Candidate.Kind.DELETE,
        episode=episode,
        other=None,
        status=Candidate.Status.PROPOSED,
        defaults={"score": score, "created_at": now},
    )
    return candidate.pk


def withdraw_delete(tenant: Tenant, episode: Episode, now: datetime) -> list[int]:
    """The episode is no longer a delete candidate (it was used or linked): close open proposals."""
    open_ = Candidate.objects.filter(
        tenant=tenant, kind=Candidate.Kind.DELETE, episode=episode, status=Candidate.Status.PROPOSED
    )
    ids = list(open_.values_list("pk", flat=True))
    open_.update(
        status=Candidate.Status.REJECTED,
        decided_at=now,
        decided_by="tick",
        note="no longer a delete candidate",
    )
    return ids


def propose_merges(t: Tick, episodes: list[Episode], scores: dict[int, tuple[float, Any]]) -> int:
    """Seed 002: low score, few links, same kind, embedding cosine >= merge_similarity."""
    policy = t.policy
    episodes = [e for e in episodes if e.layer in (Layer.WARM, Layer.COLD)]
    degree = degrees(t.tenant, [e.pk for e in episodes])
    low = sorted(
        (
            e
            for e in episodes
            if scores[e.pk][0] < policy.theta_active and sum(degree[e.pk]) <= policy.merge_max_links
        ),
        key=lambda e: (scores[e.pk][0], e.pk),
    )[:MERGE_SCAN_LIMIT]
    by_id = {e.pk: e for e in low}
    made = 0
    for a, b, similarity in sorted(
        rows.merge_neighbours(
            t.tenant, list(by_id), neighbours=MERGE_NEIGHBOURS, threshold=policy.merge_similarity
        ),
        key=lambda x: -x[2],
    ):
        score = scores[a][0]
        if not scoring.is_merge_candidate(score, policy, link_count=sum(degree[a]), similarity=similarity):
            continue
        # Any earlier proposal for the pair, in either direction and whatever its fate, stands:
        # a tick run twice proposes nothing new, and a rejection is not proposed again.
        pair = Q(episode_id=a, other_id=b) | Q(episode_id=b, other_id=a)
        if Candidate.objects.filter(pair, tenant=t.tenant, kind=Candidate.Kind.MERGE).exists():
            continue
        with transaction.atomic():
            candidate = Candidate.objects.create(
                tenant=t.tenant,
                kind=Candidate.Kind.MERGE,
                episode=by_id[a],
                other_id=b,
                similarity=similarity,
                score=score,
                created_at=t.now,
            )
            t.journal(
                by_id[a],
                "propose_merge",
                {},
                {"candidate_id": candidate.pk, "other": b, "similarity": round(similarity, 6)},
            )
        made += 1
    return made


# --- decisions --------------------------------------------------------------------------------------
def _open(candidate_id: int) -> Candidate:
    candidate = Candidate.objects.select_for_update().filter(pk=candidate_id).select_related("tenant").first()
    if candidate is None:
        raise CandidateError(f"candidate {candidate_id} does not exist")
    if candidate.status != Candidate.Status.PROPOSED:
        raise CandidateError(f"candidate {candidate_id} is already {candidate.status}")
    return candidate


def candidate_approve(*, candidate: Candidate, now: datetime, actor: str) -> Candidate:
    """Apply the proposal softly: forget (delete) or link merged_into + forget (merge); journaled."""
    with transaction.atomic():
        candidate = _open(candidate.pk)
        tenant = candidate.tenant
        after: dict[str, Any] = {"candidate_id": candidate.pk}
        if candidate.kind == Candidate.Kind.MERGE:
            survivor = Episode.objects.visible().filter(tenant=tenant).filter(pk=candidate.other_id).first()
            if survivor is None:
                raise CandidateError(
                    f"the episode to merge into (#{candidate.other_id}) is gone or forgotten"
                )
            link, created = Link.objects.get_or_create(
                tenant=tenant,
                src_id=candidate.episode_id,
                dst=survivor,
                kind=LinkKind.MERGED_INTO,
                defaults={"created_at": now},
            )
            if created:
                after["links_created"] = [[link.src_id, link.dst_id, link.kind]]
            after["merged_into"] = survivor.pk
        try:
            forget_journaled(
                tenant=tenant,
                episode_id=candidate.episode_id,
                now=now,
                actor=actor,
                action="merge" if candidate.kind == Candidate.Kind.MERGE else "delete",
                after=after,
            )
        except EpisodeNotFound:
            raise CandidateError(f"episode #{candidate.episode_id} is gone or already forgotten") from None
        candidate.status = Candidate.Status.APPLIED
        candidate.decided_at = now
        candidate.decided_by = actor
        candidate.save(update_fields=["status", "decided_at", "decided_by"])
    return candidate


def candidate_reject(*, candidate: Candidate, now: datetime, actor: str) -> Candidate:
    with transaction.atomic():
        candidate = _open(candidate.pk)
        candidate.status = Candidate.Status.REJECTED
        candidate.decided_at = now
        candidate.decided_by = actor
        candidate.save(update_fields=["status", "decided_at", "decided_by"])
        journal_record(
            tenant=candidate.tenant,
            episode=candidate.episode,
            action="reject_candidate",
            before={},
            after={"candidate_id": candidate.pk, "kind": candidate.kind},
            now=now,
            actor=actor,
        )
    return candidate
