"""The console's sidebar (the theme reads it per request: ``UNFOLD["SIDEBAR"]`` in the settings):
what an operator works with first (tenants, the review queue, the search playground, episodes,
policies), then the records, then access. Each entry shows only to a user allowed to open it; the
task queue's pages and Django's users are a superuser's, under "All applications"."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.templatetags.static import static
from django.urls import reverse

from lifecycle.models import Candidate
from memory_platform.admin_base import operated_rows


def _may(request: HttpRequest, permission: str | None) -> Any:
    allowed = permission is None or bool(request.user.has_perm(permission))
    return lambda _request: allowed


def _superuser(request: HttpRequest) -> Any:
    allowed = bool(getattr(request.user, "is_superuser", False))
    return lambda _request: allowed


def _model(request: HttpRequest, title: str, icon: str, label: str, query: str = "") -> dict[str, Any]:
    app, model = label.split(".")
    return {
        "title": title,
        "icon": icon,
        "link": reverse(f"admin:{app}_{model}_changelist") + query,
        "permission": _may(request, f"{app}.view_{model}"),
    }


def pending_candidates(request: HttpRequest) -> int:
    """The review queue's badge: proposals awaiting a decision in the tenants the user operates."""
    proposed = operated_rows(request, Candidate.objects.filter(status=Candidate.Status.PROPOSED))
    return proposed.count()


def sidebar(request: HttpRequest) -> dict[str, Any]:
    review: dict[str, Any] = {
        "title": "Review queue",
        "icon": "rule",
        "link": reverse("admin:review-queue"),
        "permission": _may(request, "lifecycle.change_candidate"),
    }
    if request.user.has_perm("lifecycle.change_candidate"):
        pending = pending_candidates(request)
        if pending:
            review["badge"] = str(pending)  # not a callback's path: the theme shows it as it is
    return {
        "show_search": False,
        "show_all_applications": bool(getattr(request.user, "is_superuser", False)),
        "navigation": [
            {
                "title": "Operate",
                "items": [
                    {"title": "Tenants", "icon": "dashboard", "link": reverse("admin:index")},
                    review,
                    {
                        "title": "Search playground",
                        "icon": "search",
                        "link": reverse("admin:playground"),
                        "permission": _may(request, "episodes.view_episode"),
                    },
                    _model(request, "Episodes", "memory", "episodes.episode"),
                    _model(request, "Policies", "tune", "lifecycle.memorypolicy"),
                ],
            },
            {
                "title": "Records",
                "items": [
                    _model(request, "Journal", "history", "lifecycle.journalentry"),
                    _model(request, "Candidates (all)", "compare_arrows", "lifecycle.candidate"),
                    _model(request, "Tick runs", "schedule", "lifecycle.tickrun"),
                    _model(request, "Turns", "chat", "episodes.turn"),
                    _model(request, "Links", "link", "episodes.link"),
                    _model(request, "Forgotten users", "person_off", "episodes.forgottenuser"),
                    _model(request, "Audit events", "fact_check", "tenancy.auditevent"),
                ],
            },
            {
                "title": "Access",
                "items": [
                    _model(request, "Tenant settings", "apartment", "tenancy.tenant"),
                    _model(request, "API keys", "key", "tenancy.apikey"),
                    {
                        **_model(request, "Operators", "badge", "tenancy.tenantoperator"),
                        "permission": _superuser(request),
                    },
                    {
                        **_model(request, "Users", "group", "auth.user"),
                        "permission": _superuser(request),
                    },
                ],
            },
        ],
    }


def favicon(request: HttpRequest) -> str:
    """The console's tab icon (without one every page asked for /favicon.ico and got a 404)."""
    return static("console/favicon.svg")


def stylesheets(request: HttpRequest) -> str:
    """The console's own few rules (side-by-side reviews, figures, the preview's panel)."""
    return static("console/console.css")
