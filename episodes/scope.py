"""What a request is about inside its tenant: the one filter type of every store, selector, search
and forget.

The tenant is never part of a scope. It comes from the API key, and every store and selector takes
it as its own argument, so no scope, however built, can reach another tenant's rows.

Each store translates a scope into its own query language (``q`` for the ORM, ``sql`` for the
warm/cold statements, ``episodes.stores.hot`` for RediSearch); what a field means is written here
once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from .models import Layer, State

ALL_LAYERS: tuple[str, ...] = tuple(Layer.values)

#: The fields naming whose conversation a memory is: an ingested turn carries all three ("" when
#: the caller gave none), and a filter on one of them matches it exactly.
OWNER_FIELDS = ("user_id", "agent_id", "session_id")


@dataclass(frozen=True)
class Scope:
    """Every field narrows; a field left at its default does not.

    ``layers`` empty means every layer; ``states`` empty means every state but ``forgotten``
    (which is only ever read when named). ``tags`` match when an episode holds any of them (a cold
    episode's keywords count as tags), or all of them with ``all_tags``. ``occurred_from`` /
    ``occurred_to`` keep episodes that overlap the window (hot turns: the turns inside it);
    ``older_than`` keeps episodes that ended before it.
    """

    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    kinds: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    all_tags: bool = False
    layers: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    anchor: bool | None = None
    occurred_from: datetime | None = None
    occurred_to: datetime | None = None
    older_than: datetime | None = None
    episode_ids: tuple[int, ...] = ()

    @classmethod
    def owner(cls, user_id: str | None = "", agent_id: str | None = "", session_id: str | None = "") -> Scope:
        """The conversation a turn belongs to (ingest): all three owner fields, "" for none."""
        return cls(user_id=user_id or "", agent_id=agent_id or "", session_id=session_id or "")

    def owner_fields(self) -> dict[str, str]:
        """The owner fields as a written row holds them ("" for none)."""
        return {name: getattr(self, name) or "" for name in OWNER_FIELDS}

    def replace(self, **changes: Any) -> Scope:
        return dataclasses.replace(self, **changes)

    @property
    def narrowed(self) -> bool:
        """Whether anything beyond layers and states narrows it (a field added later counts too)."""
        return any(
            getattr(self, f.name) != f.default
            for f in dataclasses.fields(self)
            if f.name not in ("layers", "states", "all_tags")
        )

    @property
    def visible_states(self) -> tuple[str, ...]:
        """The states it keeps, spelled out."""
        return self.states or tuple(s for s in State.values if s != State.FORGOTTEN)

    # --- translations ----------------------------------------------------------------------------
    def q(self) -> Q:
        """The scope as an ORM filter on episodes (the caller adds the tenant: ``for_tenant``)."""
        q = Q(state__in=self.states) if self.states else ~Q(state=State.FORGOTTEN)
        for name in OWNER_FIELDS:
            value = getattr(self, name)
            if value is not None:
                q &= Q(**{name: value})
        if self.kinds:
            q &= Q(kind__in=self.kinds)
        if self.layers:
            q &= Q(layer__in=self.layers)
        if self.anchor is not None:
            q &= Q(anchor=self.anchor)
        if self.tags:
            if self.all_tags:
                q &= Q(tags__contains=list(self.tags))
            else:
                q &= Q(tags__overlap=list(self.tags)) | Q(keywords__overlap=list(self.tags))
        if self.occurred_from is not None:
            q &= Q(last_occurred_at__gte=self.occurred_from)
        if self.occurred_to is not None:
            q &= Q(first_occurred_at__lte=self.occurred_to)
        if self.older_than is not None:
            q &= Q(last_occurred_at__lt=self.older_than)
        if self.episode_ids:
            q &= Q(pk__in=self.episode_ids)
        return q

    def sql(self, alias: str = "e") -> tuple[str, list[Any]]:
        """The scope as a WHERE fragment on the episodes table under ``alias`` (the caller adds the
        tenant condition), with its parameters."""
        a = alias
        clauses = [f"{a}.layer = ANY(%s)", f"{a}.state = ANY(%s)"]
        params: list[Any] = [list(self.layers or ALL_LAYERS), list(self.visible_states)]
        for name in OWNER_FIELDS:
            value = getattr(self, name)
            if value is not None:
                clauses.append(f"{a}.{name} = %s")
                params.append(value)
        if self.kinds:
            clauses.append(f"{a}.kind = ANY(%s)")
            params.append(list(self.kinds))
        if self.anchor is not None:
            clauses.append(f"{a}.anchor = %s")
            params.append(self.anchor)
        if self.tags:
            if self.all_tags:
                clauses.append(f"{a}.tags @> %s::varchar[]")
                params.append(list(self.tags))
            else:
                clauses.append(f"({a}.tags && %s::varchar[] OR {a}.keywords && %s::varchar[])")
                params.extend([list(self.tags), list(self.tags)])
        if self.occurred_from is not None:
            clauses.append(f"{a}.last_occurred_at >= %s")
            params.append(self.occurred_from)
        if self.occurred_to is not None:
            clauses.append(f"{a}.first_occurred_at <= %s")
            params.append(self.occurred_to)
        if self.older_than is not None:
            clauses.append(f"{a}.last_occurred_at < %s")
            params.append(self.older_than)
        if self.episode_ids:
            clauses.append(f"{a}.id = ANY(%s)")
            params.append(list(self.episode_ids))
        return " AND ".join(clauses), params
