"""The search playground: a query run as one of the user's tenants, through the search the API
runs (``retrieval.shaping.search_shaped``), showing each hit with the turns the answer chose and
how it was ranked (``explain``).

A trial leaves the memories as they were: it records no access (which would raise the hits'
scores) and unpacks nothing; it is counted among the tenant's searches, as it is one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms
from django.contrib.admin import AdminSite
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone

from episodes.layers import Layer
from episodes.scope import Scope
from memory_platform.admin_base import visible_tenants
from retrieval.query import SearchQuery
from retrieval.shaping import search_shaped


class PlaygroundForm(forms.Form):
    tenant = forms.ChoiceField(
        help_text="The search runs as this tenant, over its memories only.",
        widget=forms.Select(attrs={"class": "mp-input"}),
    )
    query = forms.CharField(max_length=2000, widget=forms.TextInput(attrs={"autofocus": True}))
    user_id = forms.CharField(
        required=False,
        max_length=200,
        label="User",
        help_text="Only this user's memories (empty: everyone's).",
    )
    layers = forms.MultipleChoiceField(
        required=False,
        choices=[(layer.value, layer.value) for layer in Layer],
        widget=forms.CheckboxSelectMultiple,
        help_text="Empty: every layer.",
    )
    limit = forms.IntegerField(min_value=1, max_value=50, initial=5, label="Hits")

    def __init__(self, *args: Any, tenants: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["tenant"].choices = [(name, name) for name in tenants]  # type: ignore[attr-defined]


def playground(site: AdminSite, request: HttpRequest) -> TemplateResponse:
    tenants = visible_tenants(request).order_by("name")
    names = list(tenants.values_list("name", flat=True))
    form = PlaygroundForm(
        request.POST if request.method == "POST" else None,
        tenants=names,
        initial={"tenant": request.GET.get("tenant") or (names[0] if names else None), "limit": 5},
    )
    context: dict[str, Any] = {**site.each_context(request), "title": "Search playground", "form": form}
    if form.is_valid():
        data = form.cleaned_data
        tenant = tenants.get(name=data["tenant"])
        query = SearchQuery(
            text=data["query"],
            scope=Scope(user_id=data["user_id"] or None, layers=tuple(data["layers"])),
            limit=data["limit"],
            view="full",
            explain=True,
            record_access=False,
        )
        shaped = search_shaped(tenant=tenant, query=query, now=timezone.now(), may_unpack=False)
        context["result"] = shaped.result
        context["hits"] = [_shown(hit) for hit in shaped.hits]
        context["tenant"] = tenant
    return TemplateResponse(request, "admin/console/playground.html", context)


#: A hit's ``explain`` (``episodes.shapes.Explain``) in the order it was ranked, each in words.
EXPLAIN_ROWS = (
    ("source", "found in"),
    ("best_turn_id", "its best turn"),
    ("vector_rank", "place in the vector list"),
    ("text_rank", "place in the full-text list"),
    ("rrf", "fused score (relevance)"),
    ("hop", "reached by a hop"),
    ("relevance", "relevance over the best hit's"),
    ("recency", "priority: recency"),
    ("frequency", "priority: frequency"),
    ("anchor", "priority: pinned"),
    ("priority", "priority"),
    ("state", "state's weight"),
    ("time", "lift of the time the query names"),
    ("supersedes", "lift above a memory it supersedes"),
    ("score", "score"),
)


def explain_rows(explain: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The explain's figures as (what, value) rows; a rank missing from a list is "not in it"."""
    rows = []
    for key, label in EXPLAIN_ROWS:
        if key not in explain:
            continue
        value = explain[key]
        if key == "hop" and isinstance(value, Mapping):
            shown = f"{value.get('via', '')} {value.get('name', '')}".strip()
        elif value is None:
            shown = "not in it" if key.endswith("_rank") else "—"
        elif isinstance(value, float):
            shown = f"{value:.4g}"
        else:
            shown = str(value)
        rows.append((label, shown))
    return rows


def _shown(hit: Any) -> dict[str, Any]:
    matched = set(hit.get("matched_turn_ids", []))
    shown_turns = [{**turn, "matched": turn["id"] in matched} for turn in hit.get("turns", [])]
    return {
        **hit,
        "user": hit["scope"]["user_id"] or "—",
        "shown_turns": shown_turns,
        "any_matched": any(turn["matched"] for turn in shown_turns),
        "explain_rows": explain_rows(hit.get("explain", {})),
    }
