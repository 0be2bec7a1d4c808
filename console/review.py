"""The review queue: the proposals awaiting a decision in the tenants the user operates, each with
both memories' texts and whose they are side by side, and Approve / Reject on its row. A decision
goes through ``lifecycle.candidates`` (journaled; an approved merge or delete is soft and can be
rolled back from the journal), as the candidate list's actions do."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from episodes.models import Episode
from lifecycle.candidates import CandidateError, candidate_approve, candidate_reject, owner_of
from lifecycle.models import Candidate
from memory_platform.admin_base import admin_actor, operated_rows, visible_tenants

#: Proposals on one page of the queue, oldest first.
PAGE = 25
#: How much of a memory's text the queue shows, and how many of a hot memory's turns.
TEXT_CHARS = 600
TURNS = 4

DECISIONS = {"approve": (candidate_approve, "approved"), "reject": (candidate_reject, "rejected")}


def _may_decide(request: HttpRequest) -> bool:
    return bool(request.user.has_perm("lifecycle.change_candidate"))


def _proposals(request: HttpRequest) -> Any:
    return operated_rows(request, Candidate.objects.filter(status=Candidate.Status.PROPOSED))


def side(episode: Episode) -> dict[str, Any]:
    """One memory as a reviewer reads it, its text once: whose it is, its layer and state in words,
    its packed text (the summary, else the headline) or its first turns while it has none (a hot
    memory), and its title when the text does not begin with it."""
    packed = next(
        (" ".join(text.split())[:TEXT_CHARS] for text in (episode.summary, episode.headline) if text), ""
    )
    turns = [] if packed else list(episode.turns.order_by("seq").values("role", "text")[:TURNS])
    turns = [{**turn, "text": " ".join(turn["text"].split())[:TEXT_CHARS]} for turn in turns]
    first = packed or (turns[0]["text"] if turns else "")
    title = " ".join(episode.title.split()).rstrip(".…")
    return {
        "episode": episode,
        "owner": owner_of(episode),
        "where": f"{episode.layer}, {episode.state.replace('_', ' ')}",
        "title": "" if not title or first.startswith(title) else episode.title,
        "packed": [packed] if packed else [],
        "turns": turns,
    }


def queue(site: AdminSite, request: HttpRequest) -> TemplateResponse:
    if not _may_decide(request):
        raise PermissionDenied
    proposals = _proposals(request).select_related("tenant", "episode", "other").order_by("created_at", "pk")
    tenant = request.GET.get("tenant")
    if tenant:
        proposals = proposals.filter(tenant__name=tenant)
    total = proposals.count()
    rows = [
        {
            "candidate": candidate,
            "kind": candidate.kind,
            "episode": side(candidate.episode),
            "other": side(candidate.other) if candidate.other is not None else None,
            "across_owners": candidate.other is not None
            and owner_of(candidate.episode) != owner_of(candidate.other),
        }
        for candidate in proposals[:PAGE]
    ]
    context = {
        **site.each_context(request),
        "title": "Review queue",
        "rows": rows,
        "total": total,
        "page": PAGE,
        "tenants": visible_tenants(request).order_by("name").values_list("name", flat=True),
        "tenant": tenant or "",
    }
    return TemplateResponse(request, "admin/console/review_queue.html", context)


def decide(request: HttpRequest, candidate_id: int, decision: str) -> HttpResponse:
    """Approve or reject one proposal of a tenant the user operates (404 for any other)."""
    if not _may_decide(request):
        raise PermissionDenied
    if decision not in DECISIONS:
        raise Http404
    candidate = get_object_or_404(_proposals(request).select_related("tenant"), pk=candidate_id)
    act, done = DECISIONS[decision]
    try:
        act(candidate=candidate, now=timezone.now(), actor=admin_actor(request))
    except CandidateError as exc:
        messages.warning(request, f"Proposal {candidate.pk} was not {done}: {exc}")
    else:
        messages.success(
            request, f"Proposal {candidate.pk} ({candidate.kind}, {candidate.tenant.name}) {done}."
        )
    back = reverse("admin:review-queue")
    tenant = request.POST.get("tenant")
    return HttpResponseRedirect(f"{back}?tenant={tenant}" if tenant else back)
