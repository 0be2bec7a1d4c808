"""How long ago something happened, as the console writes it: "just now" under a minute (Django's
``timesince`` alone says "0 minutes"), else "5 minutes ago", "2 hours, 3 minutes ago"."""

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
