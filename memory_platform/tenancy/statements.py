"""The tenant on every raw statement, checked where it is sent.

The read path and the tick run SQL of their own (``memory_platform.db``: ``fetch`` and
``cursor``), not the ORM, so ``TenantScopedQuerySet`` does not guard them. Each takes the tenant
it acts for, and ``check`` refuses, before the statement is sent, one that touches a table
distributed by tenant without comparing ``tenant_id`` with a parameter, or whose parameters in
those places are not that tenant. The text is read once per distinct statement (cached); what a
call costs after that is a look at its tenant's parameters.

What it reads is the text: ``tenant_id = %s``, ``tenant_id = ANY(%s)``, ``tenant_id IN (%s, ...)``
anywhere in the statement. It does not parse SQL: a statement that also reads rows through an
``OR`` or a second table joined by a key alone passes it. The test suite's recorder
(``tests/tenant_statements.py``) watches every statement of the run besides, the ORM's too, and
measures the joins by a key alone (docs/operations/scale-out.md).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Tenant-owned tables that are not distributed by tenant (docs/operations/scale-out.md): a
#: statement on them alone needs no tenant. Each with its reason.
NOT_DISTRIBUTED = {
    "tenancy_apikey": "a reference table: a key is looked up by its prefix before its tenant is known",
    "tenancy_tenantoperator": "a reference table: the console reads which tenants a staff user operates",
    "tenancy_auditevent": "a table of the coordinator: a record outlives its tenant (tenant_id set to NULL)",
}

#: ``tenant_id`` compared with parameters: ``= %s``, ``= ANY(%s)`` (a list: group ``many``),
#: ``IN (%s, ...)``.
TENANT_PREDICATE = re.compile(
    r'\btenant_id"?\s*(?:=\s*(?:%s|ANY\s*\(\s*(?P<many>%s))|IN\s*\(\s*%s(?:\s*,\s*%s)*)', re.I
)
_PLACEHOLDER = re.compile(r"%%|%s")


class StatementWithoutTenant(RuntimeError):
    """A raw statement on a tenant's table that does not name that tenant: a defect of the code that
    sent it, refused before it reached the database."""


def tenant_tables() -> dict[str, bool]:
    """Every tenant-owned model's table, and whether it is distributed by tenant."""
    from django.apps import apps

    from memory_platform.tenancy.models import Tenant

    tables = {}
    for model in apps.get_models():
        field = next((f for f in model._meta.fields if f.name == "tenant"), None)
        if field is not None and field.related_model is Tenant:
            tables[model._meta.db_table] = model._meta.db_table not in NOT_DISTRIBUTED
    return tables


@dataclass(frozen=True)
class Reading:
    """What a statement's text says: the distributed tables it names, and the positions of its
    parameters compared with ``tenant_id`` (each with whether it is a list, ``ANY(%s)``)."""

    tables: tuple[str, ...]
    slots: tuple[tuple[int, bool], ...]


@functools.cache
def _distributed_pattern() -> re.Pattern[str]:
    names = sorted((t for t, distributed in tenant_tables().items() if distributed), key=len, reverse=True)
    return re.compile(rf'(?<![\w.])"?({"|".join(map(re.escape, names))})"?(?!\w)')


@functools.lru_cache(maxsize=4096)
def reading(sql: str) -> Reading:
    tables = tuple(sorted(set(_distributed_pattern().findall(sql))))
    if not tables:
        return Reading((), ())
    # Each placeholder's position among the parameters, by its offset in the text.
    positions = {
        m.start(): i for i, m in enumerate(m for m in _PLACEHOLDER.finditer(sql) if m.group() == "%s")
    }
    slots = [
        (positions[at], found.group("many") is not None)
        for found in TENANT_PREDICATE.finditer(sql)
        for at in positions
        if found.start() <= at < found.end()
    ]
    return Reading(tables, tuple(slots))


def check(sql: str, params: Sequence[Any], tenant: Any) -> None:
    """Refuse ``sql`` (``StatementWithoutTenant``) unless every table distributed by tenant it
    touches is limited to ``tenant`` (a ``Tenant`` or its id): it compares ``tenant_id`` with at
    least one parameter, and each such parameter is that tenant. ``tenant`` None: the statement
    must touch no such table (a key's lookup by prefix, a lock, the server's settings)."""
    found = reading(sql)
    if not found.tables:
        return
    if tenant is None:
        raise StatementWithoutTenant(
            f"a statement on {', '.join(found.tables)} sent for no tenant: {_short(sql)}"
        )
    if not found.slots:
        raise StatementWithoutTenant(
            f"a statement on {', '.join(found.tables)} does not compare tenant_id with a parameter: {_short(sql)}"
        )
    want = str(getattr(tenant, "pk", tenant))
    for index, many in found.slots:
        value = params[index]
        for one in value if many else (value,):
            if str(one) != want:
                raise StatementWithoutTenant(
                    f"a statement for tenant {want} binds tenant_id to {one!r}: {_short(sql)}"
                )


def _short(sql: str) -> str:
    return " ".join(sql.split())[:300]
