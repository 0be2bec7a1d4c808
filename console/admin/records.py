"""What the platform writes and an operator reviews: tick runs, the journal (rollback after a
confirmation page) and the merge and delete candidates (approve or reject)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from episodes.models import Episode
from lifecycle.candidates import CandidateError, candidate_approve, candidate_reject, owner_of
from lifecycle.models import Candidate, JournalEntry, TickRun
from lifecycle.rollback import RollbackError, rollback_journal_entry, rollback_plan, rollback_refusal
from memory_platform.admin_base import ReadOnlyAdmin, admin_actor

from ..review import side


@admin.register(TickRun)
class TickRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "status", "started_at", "now_used", "duration_ms", "counts")
    list_filter = ("status", "tenant")
    list_select_related = ("tenant",)
    date_hierarchy = "started_at"


def _review_text(episode: Episode) -> str:
    """An episode as a reviewer reads it: id, layer, whose it is and the start of its text
    as stored (no extra statement per row: the list selects the episodes with the candidates)."""
    text = episode.headline or episode.summary or episode.search_text
    return f"{episode.public_id} [{episode.layer}] ({owner_of(episode)}): {' '.join(text.split())[:100]}"


def _review_side(episode: Episode, role: str) -> dict[str, Any]:
    """One memory of a candidate's page, as the review queue shows it (``console.review.side``)."""
    return {"role": role, **side(episode)}


@admin.register(JournalEntry)
class JournalEntryAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "tenant",
        "created_at",
        "action",
        "actor",
        "memory",
        "tick_run",
        "rolled_back_at",
    )
    list_filter = ("action", "tenant")
    list_select_related = ("tenant", "tick_run", "episode")
    search_fields = ("episode_id_value", "action")
    date_hierarchy = "created_at"
    actions = ["roll_back"]
    # The page of one entry: what changed, from what to what (the model's help texts are a
    # developer's; these labels are the operator's).
    fields = (
        "tenant",
        "created_at",
        "action_shown",
        "actor_shown",
        "memory",
        "tick_run",
        "before_shown",
        "after_shown",
        "rolled_back_at",
    )
    readonly_fields = fields

    @admin.display(description="action")
    def action_shown(self, entry: JournalEntry) -> str:
        return entry.action

    @admin.display(description="by")
    def actor_shown(self, entry: JournalEntry) -> str:
        return entry.actor or "—"

    @admin.display(description="before (what a rollback restores)")
    def before_shown(self, entry: JournalEntry) -> str:
        return json.dumps(entry.before, indent=1, sort_keys=True, default=str)[:2000]

    @admin.display(description="after")
    def after_shown(self, entry: JournalEntry) -> str:
        return json.dumps(entry.after, indent=1, sort_keys=True, default=str)[:2000]

    @admin.display(description="memory", ordering="episode_id_value")
    def memory(self, entry: JournalEntry) -> str:
        """The memory's public id (the row id after a purge removed the memory)."""
        if entry.episode is not None:
            return f"{entry.episode.public_id} {entry.episode.title}"[:80]
        return f"#{entry.episode_id_value} (purged)" if entry.episode_id_value else "—"

    def has_rollback_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("lifecycle.change_journalentry"))

    @admin.action(
        description="Roll back (and the later entries of the same episode)", permissions=["rollback"]
    )
    def roll_back(self, request: HttpRequest, queryset: QuerySet[JournalEntry]) -> HttpResponse | None:
        if request.POST.get("confirmed") != "yes":
            # First a page saying what will change; the rollback happens when it is confirmed.
            plans = [
                {"entry": entry, "undone": rollback_plan(entry), "problem": rollback_refusal(entry)}
                for entry in queryset.select_related("tenant", "episode").order_by("-pk")
            ]
            context = {
                **self.admin_site.each_context(request),
                "title": "Roll back journal entries?",
                "opts": self.model._meta,
                "plans": plans,
                "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                "action": "roll_back",
            }
            return TemplateResponse(
                request, "admin/lifecycle/journalentry/rollback_confirmation.html", context
            )
        now = timezone.now()
        done = 0
        # Newest first, so an entry already undone by a later one's cascade is simply reported.
        for entry in queryset.order_by("-pk"):
            entry.refresh_from_db(fields=["rolled_back_at"])
            if entry.rolled_back_at is not None:
                continue
            try:
                done += len(rollback_journal_entry(entry, now=now, actor=admin_actor(request)))
            except RollbackError as exc:
                self.message_user(request, f"entry {entry.pk}: {exc}", messages.WARNING)
        self.message_user(
            request, f"rolled back {done} journal {'entry' if done == 1 else 'entries'}", messages.SUCCESS
        )
        return None


@admin.register(Candidate)
class CandidateAdmin(ReadOnlyAdmin):
    """Every proposal, decided ones included (those awaiting a decision are reviewed in the review
    queue, ``console.review``): a merge proposal shows both texts and whose each is with their
    similarity, a delete proposal its text and why (its activity score fell below the policy's
    threshold). A candidate's page shows both memories in full beside each other."""

    list_display = (
        "id",
        "tenant",
        "kind",
        "episode_text",
        "other_text",
        "similarity_shown",
        "score_shown",
        "status",
    )
    list_filter = ("kind", "status", "tenant")
    list_select_related = ("tenant", "episode", "other")
    fields = (
        "tenant",
        "kind",
        "status",
        "similarity_shown",
        "score_shown",
        "created_at",
        "decided_at",
        "decided_by",
        "note",
    )
    readonly_fields = fields
    date_hierarchy = "created_at"
    actions = ["approve", "reject"]
    change_form_template = "admin/lifecycle/candidate/change_form.html"

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        candidate = self.get_object(request, object_id)
        review: dict[str, Any] | None = None
        if candidate is not None and candidate.other is not None:
            review = {
                "sides": [
                    _review_side(candidate.episode, "merged away"),
                    _review_side(candidate.other, "survives"),
                ],
                "across_owners": owner_of(candidate.episode) != owner_of(candidate.other),
            }
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "review": review})

    def has_decide_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("lifecycle.change_candidate"))

    @admin.display(description="merged away, or deleted")
    def episode_text(self, obj: Candidate) -> str:
        return _review_text(obj.episode)

    @admin.display(description="survives (merge)")
    def other_text(self, obj: Candidate) -> str:
        return (
            _review_text(obj.other) if obj.other is not None else f"— delete: activity score {obj.score:.2f}"
        )

    @admin.display(description="similarity", ordering="similarity")
    def similarity_shown(self, obj: Candidate) -> str:
        return f"{obj.similarity:.2f}" if obj.similarity is not None else "—"

    @admin.display(description="score", ordering="score")
    def score_shown(self, obj: Candidate) -> str:
        return f"{obj.score:.2f}" if obj.score is not None else "—"

    def _decide(self, request: HttpRequest, queryset: QuerySet[Candidate], decide: Any, label: str) -> None:
        now = timezone.now()
        done = 0
        for candidate in queryset.order_by("pk"):
            try:
                decide(candidate=candidate, now=now, actor=admin_actor(request))
                done += 1
            except CandidateError as exc:
                self.message_user(request, f"candidate {candidate.pk}: {exc}", messages.WARNING)
        self.message_user(request, f"{label} {done} candidate(s)", messages.SUCCESS)

    @admin.action(
        description="Approve (soft: forget, or link merged_into and forget; journaled)",
        permissions=["decide"],
    )
    def approve(self, request: HttpRequest, queryset: QuerySet[Candidate]) -> None:
        self._decide(request, queryset, candidate_approve, "approved")

    @admin.action(description="Reject", permissions=["decide"])
    def reject(self, request: HttpRequest, queryset: QuerySet[Candidate]) -> None:
        self._decide(request, queryset, candidate_reject, "rejected")
