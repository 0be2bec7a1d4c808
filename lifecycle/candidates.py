"""Merge and delete candidates (docs/concepts.md#candidates-merges-and-deletes): proposed by the tick, decided
by an operator.

Nothing here merges or deletes by itself. Approving is soft and journaled: a delete forgets the
episode (restorable for `purge_grace_days`), a merge links the episode `merged_into` the survivor
and forgets it. Both can be rolled back from the journal. A merge stays within one user and agent,
and a cluster of near-duplicates is proposed once (docs/decisions/0040-merges-within-one-scope.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from django.db import transaction
from django.db.models import Q

from episodes.models import Episode, Layer, Link, LinkKind
from episodes.services import EpisodeNotFound
from episodes.stores import merges
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
    """The candidate cannot be decided (already decided, its episodes gone or forgotten, or a
    merge across owners)."""


def owner_of(episode: Episode) -> str:
    """Whose a memory is, as a reviewer reads it: ``user u-bob, agent —`` (the ``MERGE_SCOPE``)."""
    return ", ".join(
        f"{name.removesuffix('_id')} {value or '—'}"
        for name, value in zip(merges.MERGE_SCOPE, merges.merge_scope(episode), strict=True)
    )


def propose_delete(tenant: Tenant, episode: Episode, score: float, now: datetime) -> int:
    candidate, _ = Candidate.objects.get_or_create(
        tenant=tenant,
        kind=Candidate.Kind.DELETE,
        episode=episode,
        other=None,
        status=Candidate.Status.PROPOSED,
        defaults={"score": score, "created_at": now, "episode_version": episode.version},
    )
    return candidate.pk


def withdraw_delete(
    tenant: Tenant,
    episode: Episode,
    now: datetime,
    *,
    actor: str = "tick",
    why: str = "no longer a delete candidate",
    merges: bool = False,
) -> list[int]:
    """The episode is no longer a delete candidate (it was used, linked or pinned): close its open
    delete proposals, and with ``merges`` those that would merge it away (a use or a pin makes the
    memory current; the tick's own judgement of decay leaves its merges standing)."""
    open_ = Candidate.objects.filter(tenant=tenant, episode=episode, status=Candidate.Status.PROPOSED)
    if not merges:
        open_ = open_.filter(kind=Candidate.Kind.DELETE)
    ids = list(open_.values_list("pk", flat=True))
    open_.update(status=Candidate.Status.REJECTED, decided_at=now, decided_by=actor, note=why)
    return ids


def propose_merges(t: Tick) -> int:
    """Merge proposals within one owner, one per member of a cluster of near-duplicates
    (docs/decisions/0040-merges-within-one-scope.md).

    A packed episode may be merged away when it scores low, has few links and is near enough to
    another (``scoring.is_merge_candidate``); its nearest neighbours are searched among the packed
    episodes of the same kind and owner (``merges.MERGE_SCOPE``). The pairs found join into clusters
    (union-find), and each cluster is proposed once: every member that may be merged away, into
    the cluster's survivor (``_survival_ranks``), so no episode is both merged and merged into, and no
    proposal chains into another. A member too far from the survivor itself waits until the
    cluster is decided.

    An episode in an open proposal (of either kind, on either side) is left out, and any earlier
    proposal for a pair, in either direction and whatever its fate, stands: a tick run twice
    proposes nothing new, and a rejection is not proposed again."""
    policy = t.policy
    listing = t.listing()
    packed = listing.rows(anchor=False)
    packed = packed[np.isin(listing.layer[packed], [Layer.WARM, Layer.COLD])]
    ids = listing.ids.tolist()
    degree = listing.stats.in_degree + listing.stats.out_degree
    score = {ids[i]: float(listing.scores[i]) for i in packed.tolist()}
    links = {ids[i]: int(degree[i]) for i in packed.tolist()}

    def mergeable(pk: int, similarity: float) -> bool:
        return scoring.is_merge_candidate(score[pk], policy, link_count=links[pk], similarity=similarity)

    low_rows = packed[
        (listing.scores[packed] < policy.theta_active) & (degree[packed] <= policy.merge_max_links)
    ]
    # Lowest score first, then the lowest id.
    low_rows = low_rows[np.lexsort((listing.ids[low_rows], listing.scores[low_rows]))][:MERGE_SCAN_LIMIT]
    low = [ids[i] for i in low_rows.tolist()]
    packed_all = int(np.isin(listing.layer, [Layer.WARM, Layer.COLD]).sum())  # pinned ones too
    found = merges.merge_neighbours(
        t.tenant, low, neighbours=MERGE_NEIGHBOURS, threshold=policy.merge_similarity, packed=packed_all
    )
    earlier, busy = _merge_history(t.tenant, {pk for a, b, _ in found for pk in (a, b)})
    pairs = [
        (a, b)
        for a, b, similarity in found
        if not {a, b} & busy and frozenset((a, b)) not in earlier and mergeable(a, similarity)
    ]
    clusters = _clusters(pairs)
    ranked = _survival_ranks(t, {pk for cluster in clusters for pk in cluster})
    in_low = set(low)
    wanted = []
    for found_cluster in clusters:
        cluster = [pk for pk in found_cluster if pk in ranked]  # one erased meanwhile is gone
        if len(cluster) < 2:
            continue
        survivor = max(cluster, key=ranked.__getitem__)
        wanted += [
            (pk, survivor)
            for pk in cluster
            if pk != survivor and pk in in_low and frozenset((pk, survivor)) not in earlier
        ]
    similarities = merges.merge_similarities(t.tenant, wanted)
    episodes = t.instances([pk for pk, _ in wanted])
    made = 0
    for pk, survivor in wanted:
        similarity = similarities.get((pk, survivor))
        if similarity is None or not mergeable(pk, similarity) or pk not in episodes:
            continue
        with transaction.atomic():
            candidate = Candidate.objects.create(
                tenant=t.tenant,
                kind=Candidate.Kind.MERGE,
                episode=episodes[pk],
                other_id=survivor,
                similarity=similarity,
                score=score[pk],
                created_at=t.now,
                episode_version=episodes[pk].version,
            )
            t.journal(
                episodes[pk],
                "propose_merge",
                {},
                {"candidate_id": candidate.pk, "other": survivor, "similarity": round(similarity, 6)},
            )
        made += 1
    return made


def _merge_history(tenant: Tenant, episode_ids: set[int]) -> tuple[set[frozenset[int]], set[int]]:
    """Of these episodes: the pairs of every merge proposal ever made (either direction, any
    status), and the episodes in an open proposal of either kind."""
    touching = Candidate.objects.filter(tenant=tenant).filter(
        Q(episode_id__in=episode_ids) | Q(other_id__in=episode_ids)
    )
    earlier: set[frozenset[int]] = set()
    busy: set[int] = set()
    for kind, status, episode_id, other_id in touching.filter(
        Q(kind=Candidate.Kind.MERGE) | Q(status=Candidate.Status.PROPOSED)
    ).values_list("kind", "status", "episode_id", "other_id"):
        if kind == Candidate.Kind.MERGE:
            earlier.add(frozenset((episode_id, other_id)))
        if status == Candidate.Status.PROPOSED:
            busy.update(pk for pk in (episode_id, other_id) if pk is not None)
    return earlier, busy


def _clusters(pairs: list[tuple[int, int]]) -> list[list[int]]:
    """The connected groups of the pairs (union-find), each sorted, in the order of their first."""
    parent: dict[int, int] = {}

    def root(pk: int) -> int:
        parent.setdefault(pk, pk)
        while parent[pk] != pk:
            parent[pk] = parent[parent[pk]]
            pk = parent[pk]
        return pk

    for a, b in pairs:
        parent[root(a)] = root(b)
    groups: dict[int, list[int]] = {}
    for pk in sorted(parent):
        groups.setdefault(root(pk), []).append(pk)
    return list(groups.values())


def _survival_ranks(t: Tick, members: set[int]) -> dict[int, tuple[bool, float, int, int]]:
    """What makes a cluster's survivor: the pinned member (an anchor is never merged away), else
    the highest activity score, then the most recently used, then the oldest (a tie of copies
    keeps the public id that has been given out longest). A pinned member ranks with score 0 (the
    anchor comes first), and so does one the tick did not list (read here)."""
    listing = t.listing()
    ranked: dict[int, tuple[bool, float, int, int]] = {}
    for pk in members:
        i = listing.row_of(pk)
        if i is not None:
            anchor = bool(listing.anchor[i])
            score = 0.0 if anchor else float(listing.scores[i])
            ranked[pk] = (anchor, score, int(listing.stats.last_accessed_at[i]), -pk)
    unlisted = Episode.objects.filter(tenant=t.tenant, pk__in=members - ranked.keys())
    for pk, anchor, last_accessed_at in unlisted.values_list("pk", "anchor", "last_accessed_at"):
        ranked[pk] = (anchor, 0.0, scoring.micros(last_accessed_at), -pk)
    return ranked


# --- decisions --------------------------------------------------------------------------------------
def _open(candidate: Candidate) -> Candidate:
    """The candidate's row again, locked (the instance given was read for its tenant)."""
    candidate_id, named = candidate.pk, candidate.public_id
    candidate = (
        Candidate.objects.for_tenant(candidate.tenant_id)
        .select_for_update()
        .filter(pk=candidate_id)
        .select_related("tenant")
        .first()
    )
    if candidate is None:
        raise CandidateError(f"candidate {named} does not exist")
    if candidate.status != Candidate.Status.PROPOSED:
        raise CandidateError(f"candidate {named} is already {candidate.status}")
    return candidate


def candidate_approve(*, candidate: Candidate, now: datetime, actor: str) -> Candidate:
    """Apply the proposal softly: forget (delete) or link merged_into + forget (merge); journaled.
    Refused (``CandidateError``) when the memory is pinned, or changed since it was proposed."""
    with transaction.atomic():
        candidate = _open(candidate)
        tenant = candidate.tenant
        _refuse_changed(candidate)
        after: dict[str, Any] = {"candidate_id": candidate.pk}
        if candidate.kind == Candidate.Kind.MERGE:
            survivor = Episode.objects.visible().filter(tenant=tenant).filter(pk=candidate.other_id).first()
            if survivor is None:
                other = candidate.other.public_id if candidate.other is not None else "?"
                raise CandidateError(f"the memory to merge into ({other}) is gone or forgotten")
            _refuse_across_owners(candidate.episode, survivor)
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
            raise CandidateError(
                f"memory {candidate.episode.public_id} is gone or already forgotten"
            ) from None
        candidate.status = Candidate.Status.APPLIED
        candidate.decided_at = now
        candidate.decided_by = actor
        candidate.save(update_fields=["status", "decided_at", "decided_by"])
    return candidate


def _refuse_changed(candidate: Candidate) -> None:
    """A proposal is a judgement of the memory as it was: a pinned memory is never deleted or merged
    away, and one used, restored or edited since (its version moved) is judged again by the next
    tick, not decided on the old judgement."""
    episode = Episode.objects.filter(
        tenant_id=candidate.tenant_id, pk=candidate.episode_id
    ).select_for_update()
    found = episode.values_list("anchor", "version").first()
    if found is None:
        raise CandidateError(f"memory {candidate.episode.public_id} is gone")
    anchor, version = found
    named = candidate.episode.public_id
    if anchor:
        raise CandidateError(
            f"memory {named} is pinned: a pinned memory is never {_undone(candidate)}; reject it"
        )
    if candidate.episode_version is not None and version != candidate.episode_version:
        raise CandidateError(
            f"memory {named} changed since it was proposed (used, restored or edited): reject it; "
            "the next tick proposes it again if it still decays"
        )


def _undone(candidate: Candidate) -> str:
    return "merged away" if candidate.kind == Candidate.Kind.MERGE else "deleted"


def _refuse_across_owners(merged: Episode, survivor: Episode) -> None:
    """A merge never makes one person's memory disappear into another's, whoever proposed it
    (the tick proposes none: ``merges.merge_neighbours``)."""
    if merges.merge_scope(merged) != merges.merge_scope(survivor):
        raise CandidateError(
            f"memory {merged.public_id} ({owner_of(merged)}) and {survivor.public_id} ({owner_of(survivor)}) "
            "belong to different users or agents: a merge stays within one "
            "(docs/decisions/0040-merges-within-one-scope.md); reject it"
        )


def candidate_reject(*, candidate: Candidate, now: datetime, actor: str) -> Candidate:
    with transaction.atomic():
        candidate = _open(candidate)
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
