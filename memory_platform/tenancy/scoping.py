"""One tenant path, failing closed: a query on a tenant-owned model runs only when it is scoped.

Every model with a ``tenant`` foreign key (episodes, turns, links, the journal, candidates, keys...)
has ``TenantScopedQuerySet`` as its default manager. A query built from it is *scoped* when

- it filters on the tenant (``filter(tenant=...)``, ``tenant_id=``, ``tenant_id__in=``, any
  ``tenant__...`` lookup), or is narrowed with ``for_tenant(tenant)``;
- it filters on a row that was itself read scoped (``filter(episode=episode)``, an episode's
  ``turns`` related manager, ``prefetch_related``): a model instance carries its tenant;
- or it says it crosses tenants on purpose: ``across_tenants("why")``.

Anything else raises ``UnscopedQuery`` when it would reach the database (iteration, ``get``,
``count``, ``exists``, ``update``, ``delete``...), before any SQL is sent: a forgotten tenant
filter is an error in the first test that runs the code, not a leak. ``grep -rn across_tenants``
lists every place that reads or writes more than one tenant's rows (docs/concepts.md#tenants).

Django's own machinery (saving an instance, cascades, forward foreign keys, migrations) uses the
plain base manager, which this does not touch; raw SQL (``memory_platform.db``) carries its tenant
by convention and is not covered.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Self

from django.db import models


class UnscopedQuery(RuntimeError):
    """A query on a tenant-owned model with no tenant in it and no ``across_tenants`` reason."""


def _carries_tenant(value: Any) -> bool:
    """A model instance of a tenant-owned model (it was read or made for one tenant)."""
    return isinstance(value, models.Model) and getattr(value, "tenant_id", None) is not None


#: What may follow ``tenant`` or ``tenant_id`` in a lookup that names tenants by key (``tenant__is_active``
#: names none).
_KEY_PARTS = frozenset({"pk", "id", "exact", "in"})


def _scopes(lookup: str, value: Any) -> bool:
    first, *rest = lookup.split("__")
    if first in ("tenant", "tenant_id"):
        return value is not None and set(rest) <= _KEY_PARTS
    if _carries_tenant(value):
        return True
    if (
        lookup.endswith("__in")
        and isinstance(value, Sequence | set | frozenset)
        and not isinstance(value, str)
    ):
        items = list(value)
        return bool(items) and all(_carries_tenant(v) for v in items)
    return False


class TenantScopedQuerySet(models.QuerySet):
    """The queryset of every tenant-owned model (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Why this query may run: "tenant" (filtered on one), or the reason given to
        #: ``across_tenants``. None: it may not.
        self._tenant_scope: str | None = None

    # --- how a query gets scoped ------------------------------------------------------------------
    def for_tenant(self, tenant: Any) -> Self:
        """The rows of ``tenant`` (a ``Tenant`` or its primary key), and only those."""
        if tenant is None:
            raise UnscopedQuery(f"{self.model.__name__}: for_tenant(None)")
        return self.filter(tenant=tenant)

    def across_tenants(self, reason: str) -> Self:
        """Every tenant's rows, on purpose: ``reason`` says why (the tick's scan, the console of a
        superuser, erasure's check). Grep for it to list every such place."""
        if not reason.strip():
            raise ValueError("across_tenants needs a reason")
        clone = self._chain()  # type: ignore[attr-defined]
        clone._tenant_scope = reason
        return clone

    def none(self) -> Self:
        clone = super().none()
        clone._tenant_scope = "nothing"
        return clone

    def _clone(self) -> Self:
        clone = super()._clone()  # type: ignore[misc]
        clone._tenant_scope = self._tenant_scope
        return clone

    def _filter_or_exclude(self, negate: bool, args: Any, kwargs: Any) -> Self:
        clone = super()._filter_or_exclude(negate, args, kwargs)  # type: ignore[misc]
        if not negate and clone._tenant_scope is None and any(_scopes(k, v) for k, v in kwargs.items()):
            clone._tenant_scope = "tenant"
        return clone

    # --- where it is checked: every way a query reaches the database ------------------------------
    def _require_scope(self) -> None:
        if self._tenant_scope is None:
            raise UnscopedQuery(
                f"a query on {self.model.__name__} without a tenant: filter it with for_tenant(tenant) "
                "(or on a row read for one), or say why it crosses tenants with across_tenants(reason)"
            )

    def _fetch_all(self) -> None:
        if self._result_cache is None:
            self._require_scope()
        super()._fetch_all()

    def iterator(self, chunk_size: int | None = None) -> Any:
        self._require_scope()
        return super().iterator(chunk_size=chunk_size)

    def count(self) -> int:
        if self._result_cache is None:
            self._require_scope()
        return super().count()

    def exists(self) -> bool:
        if self._result_cache is None:
            self._require_scope()
        return super().exists()

    def contains(self, obj: Any) -> bool:
        self._require_scope()
        return super().contains(obj)

    def aggregate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self._require_scope()
        return super().aggregate(*args, **kwargs)

    def update(self, **kwargs: Any) -> int:
        self._require_scope()
        return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        self._require_scope()
        return super().delete()

    def explain(self, *args: Any, **kwargs: Any) -> str:
        self._require_scope()
        return super().explain(*args, **kwargs)

    def bulk_update(self, objs: Iterable[Any], fields: Iterable[str], batch_size: int | None = None) -> int:
        """The given rows, which were read or made for their tenants: they scope the update."""
        objs = list(objs)
        if not all(_carries_tenant(o) for o in objs):
            raise UnscopedQuery(f"bulk_update of {self.model.__name__} rows without a tenant")
        return super(TenantScopedQuerySet, self.across_tenants("the given rows")).bulk_update(
            objs, fields, batch_size=batch_size
        )


class TenantScopedManager(models.Manager.from_queryset(TenantScopedQuerySet)):  # type: ignore[misc]
    """The default manager of a tenant-owned model (``TenantScopedQuerySet``)."""


def across_tenants(queryset: models.QuerySet, reason: str) -> models.QuerySet:
    """``queryset.across_tenants(reason)`` for a tenant-owned model's queryset, else ``queryset``
    unchanged (code shared by tenant-owned models and others, such as the console's base admin)."""
    if isinstance(queryset, TenantScopedQuerySet):
        return queryset.across_tenants(reason)
    return queryset
