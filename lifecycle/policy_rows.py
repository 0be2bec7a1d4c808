"""A tenant's policy row read, created and compared: ``read_policy`` gives the code the typed, immutable
``Policy`` from one statement; ``policy_row`` the model row, to change or show it; ``policy_diff``
what a change changed (docs/decisions/0049-one-policy-reader.md)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from memory_platform import db
from memory_platform.tenancy.models import Tenant

from .policy import MemoryPolicy
from .tenant_policy import Policy


def read_policy(tenant: Tenant) -> Policy:
    """The tenant's policy, read from one statement (created with the defaults on first use).

    Every ingest and every search reads it: one fast-path statement of the columns, no model
    instance to build. Read it once per request or task and pass it down."""
    return read_policy_beside(tenant, ())[0]


def read_policy_beside(
    tenant: Tenant, expressions: Sequence[tuple[str, Sequence[Any]]]
) -> tuple[Policy, list[Any]]:
    """The tenant's policy (``read_policy``) and the values of ``expressions`` (each a SQL
    expression, a scalar subquery or an ``ARRAY(...)``, with its parameters) in one statement: what
    a request reads before it can start, in one round trip instead of one each. A tenant without a
    policy row yet gets it created, and the expressions are read by a second statement."""
    selected = "".join(f", {sql}" for sql, _ in expressions)
    params = [value for _, values in expressions for value in values]
    row = db.fetch_one(_policy_query(selected), [*params, tenant.pk], tenant=tenant)
    if row is None:
        return policy_row(tenant).values(), db.expression_values(expressions, tenant=tenant)
    names = Policy.field_names()
    return Policy(**dict(zip(names, row[: len(names)], strict=True))), list(row[len(names) :])


@functools.cache
def _policy_query(selected: str) -> str:
    meta = MemoryPolicy._meta
    columns = db.column_list((meta.get_field(name) for name in Policy.field_names()), "p")
    return f"SELECT {columns}{selected} FROM {meta.db_table} p WHERE p.tenant_id = %s"


def policy_row(tenant: Tenant) -> MemoryPolicy:
    """The tenant's policy row, to change and save (``lifecycle.services.policy_save``) or to show
    as it is stored (the API, an export); created with the defaults on first use (get_or_create
    survives the race). The code that acts on the policy reads it with ``read_policy``."""
    policy, _ = MemoryPolicy.objects.for_tenant(tenant).get_or_create(tenant=tenant)
    return policy


#: Fields whose values a change record never shows (only that they changed).
SECRET_FIELDS = frozenset({"llm_api_key"})


def policy_diff(before: MemoryPolicy, after: MemoryPolicy) -> dict[str, list[Any]]:
    """The fields that differ, as ``{name: [old, new]}`` (secrets as "(set)" or "(empty)")."""
    changed: dict[str, list[Any]] = {}
    for field in MemoryPolicy._meta.concrete_fields:
        if field.name in {"id", "tenant", "updated_at"}:
            continue
        old, new = field.value_from_object(before), field.value_from_object(after)
        if old != new:
            if field.name in SECRET_FIELDS:
                old, new = ("(set)" if old else "(empty)"), ("(set)" if new else "(empty)")
            changed[field.name] = [old, new]
    return changed
