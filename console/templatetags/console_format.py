"""How the console writes times and names for people: ``ago`` ("just now" under a minute, where
Django's ``timesince`` alone says "0 minutes"; else "5 minutes ago"), ``words`` (a step's or a
count's name: "hot_to_warm" as "hot → warm")."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.timesince import timesince

register = template.Library()


@register.filter
def ago(value: datetime | None, now: datetime | None = None) -> str:
    """``{{ when|ago }}`` (or ``{{ when|ago:now }}``, the page's own time)."""
    if value is None:
        return ""
    said = timesince(value, now)
    return "just now" if said.startswith("0\xa0minutes") else f"{said} ago"


@register.filter
def words(name: str) -> str:
    """``{{ step|words }}``: ``hot_to_warm`` -> ``hot → warm``, ``merge_candidates`` -> ``merge candidates``."""
    return str(name).replace("_to_", " → ").replace("_", " ")
