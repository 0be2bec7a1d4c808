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

Two querysets combine (``|``, ``&``, ``^``, ``union``, ``intersection``, ``difference``) only when
both are scoped to the same tenants (both filtered on the same ones, both ``across_tenants``, or
one of them ``none()``); else ``UnscopedQuery`` at once. Without it ``for_tenant(a) |
filter(pk=x)`` would read ``WHERE tenant_id = a OR id = x``: another tenant's row.

Django's own machinery (saving an instance, cascades, forward foreign keys, migrations) uses the
plain base manager, which refuses nothing. For Postgres distributed by tenant every statement
should name the tenant all the same (docs/operations/scale-out.md): a filter on rows adds their
``tenant_id``, and a model distributed by tenant (``TenantOwned``, its keys to others
``TenantForeignKey``) names its tenant when it is saved or reloaded, when a foreign key's row is
read and when rows are prefetched. This module guards the ORM only: raw SQL
(``memory_platform.db``) writes ``tenant_id = %s`` by hand, and only the test suite checks the
statements it sends (``tests/tenant_statements.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Self

from django.db import models
from django.db.models.fields.related_descriptors import (
    ForwardManyToOneDescriptor,
    ReverseManyToOneDescriptor,
)
from django.utils.functional import cached_property


class UnscopedQuery(RuntimeError):
    """A query on a tenant-owned model with no tenant in it and no ``across_tenants`` reason."""


def _carries_tenant(value: Any) -> bool:
    """A model instance of a tenant-owned model (it was read or made for one tenant)."""
    return isinstance(value, models.Model) and getattr(value, "tenant_id", None) is not None


#: What may follow ``tenant`` or ``tenant_id`` in a lookup that names tenants by key (``tenant__is_active``
#: names none).
_KEY_PARTS = frozenset({"pk", "id", "exact", "in"})


def _names_tenant(lookup: str) -> bool:
    return lookup.split("__", 1)[0] in ("tenant", "tenant_id")


def _scopes(lookup: str, value: Any) -> bool:
    if _names_tenant(lookup):
        return value is not None and set(lookup.split("__")[1:]) <= _KEY_PARTS
    return bool(_tenants_of_rows(lookup, value))


def _tenants_of_rows(lookup: str, value: Any) -> set[Any]:
    """The tenants of the rows a lookup names (a row, or rows with ``__in``), each read for its
    tenant; empty when it names none, or any row without a tenant."""
    if _carries_tenant(value):
        return {value.tenant_id}
    if (
        lookup.endswith("__in")
        and isinstance(value, Sequence | set | frozenset)
        and not isinstance(value, str)
    ):
        items = list(value)
        if items and all(_carries_tenant(v) for v in items):
            return {v.tenant_id for v in items}
    return set()


def _required_lookups(args: Any, kwargs: Any) -> list[tuple[str, Any]]:
    """The (lookup, value) pairs every row of a ``filter(*args, **kwargs)`` satisfies: the keyword
    arguments and the terms of ``Q`` objects that AND them (Django's ``prefetch_related`` filters
    with ``Q(episode__in=rows)``)."""
    lookups = list(kwargs.items())
    for q in args:
        if isinstance(q, models.Q) and q.connector == models.Q.AND and not q.negated:
            lookups += [term for term in q.children if isinstance(term, tuple)]
    return lookups


def _tenant_key(value: Any) -> str:
    """A tenant as a lookup names it (a ``Tenant``, its primary key, as a UUID or a string), one way."""
    if isinstance(value, models.Model):
        value = value.pk
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        return str(value)


def _named_tenants(lookups: Iterable[tuple[str, Any]]) -> frozenset[str] | None:
    """The tenants the lookups that name tenants by key restrict the rows to; None when none does,
    or when one names them by something other than values (a subquery)."""
    named: frozenset[str] | None = None
    for lookup, value in lookups:
        parts = lookup.split("__")
        if not _names_tenant(lookup) or not set(parts[1:]) <= _KEY_PARTS or value is None:
            continue
        if parts[-1] == "in":
            if not isinstance(value, Sequence | set | frozenset) or isinstance(value, str):
                return None
            these = frozenset(_tenant_key(v) for v in value)
        elif isinstance(value, models.Model | uuid.UUID | str | int):
            these = frozenset({_tenant_key(value)})
        else:
            return None
        named = these if named is None else named & these
    return named


def _tenant_filter(tenants: set[Any]) -> dict[str, Any]:
    if len(tenants) == 1:
        return {"tenant_id": next(iter(tenants))}
    return {"tenant_id__in": sorted(tenants, key=str)}


class TenantScopedQuerySet(models.QuerySet):
    """The queryset of every tenant-owned model (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Why this query may run: "tenant" (filtered on one), or the reason given to
        #: ``across_tenants``. None: it may not.
        self._tenant_scope: str | None = None
        #: With "tenant": the tenants its first tenant filter named (None: not known by value).
        self._tenants: frozenset[str] | None = None

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
        clone._tenant_scope, clone._tenants = reason, None
        return clone

    def none(self) -> Self:
        clone = super().none()
        clone._tenant_scope = "nothing"
        return clone

    def _clone(self) -> Self:
        clone = super()._clone()  # type: ignore[misc]
        clone._tenant_scope, clone._tenants = self._tenant_scope, self._tenants
        return clone

    def _filter_or_exclude(self, negate: bool, args: Any, kwargs: Any) -> Self:
        lookups = [] if negate else _required_lookups(args, kwargs)
        if not any(_names_tenant(k) for k, _ in lookups):
            # A row names its tenant: the statement names it too (``filter(episode=episode)``, a
            # related manager, ``prefetch_related``), so that Postgres distributed by tenant sends
            # it to that tenant's shard alone (docs/operations/scale-out.md).
            tenants: set[Any] = set().union(*(_tenants_of_rows(k, v) for k, v in lookups))
            if tenants:
                kwargs = {**kwargs, **_tenant_filter(tenants)}
                lookups += kwargs.items()
        clone = super()._filter_or_exclude(negate, args, kwargs)  # type: ignore[misc]
        if clone._tenant_scope is None and any(_scopes(k, v) for k, v in lookups):
            clone._tenant_scope, clone._tenants = "tenant", _named_tenants(lookups)
        return clone

    # --- combining two querysets -----------------------------------------------------------------
    def _scope_key(self) -> tuple[Any, ...] | None:
        if self._tenant_scope is None:
            return None
        if self._tenant_scope == "tenant":
            return ("tenant", self._tenants) if self._tenants is not None else None
        return ("nothing",) if self._tenant_scope == "nothing" else ("across",)

    def _combinable(self, other: Any, how: str) -> None:
        """Refuse to combine with ``other`` unless both are scoped to the same tenants (module
        docstring)."""
        mine = self._scope_key()
        theirs = other._scope_key() if isinstance(other, TenantScopedQuerySet) else None
        if mine is not None and theirs is not None and (mine == theirs or ("nothing",) in (mine, theirs)):
            return
        raise UnscopedQuery(
            f"{how} of two {self.model.__name__} querysets not scoped to the same tenant: filter both "
            "with for_tenant(tenant), or say why both cross tenants with across_tenants(reason)"
        )

    def __and__(self, other: Any) -> Self:
        self._combinable(other, "&")
        return super().__and__(other)  # type: ignore[no-any-return]

    def __or__(self, other: Any) -> Self:
        self._combinable(other, "|")
        return super().__or__(other)  # type: ignore[no-any-return]

    def __xor__(self, other: Any) -> Self:
        self._combinable(other, "^")
        return super().__xor__(other)  # type: ignore[no-any-return]

    def _combinator_query(self, combinator: str, *other_qs: Any, all: bool = False) -> Self:
        for other in other_qs:
            self._combinable(other, combinator)
        return super()._combinator_query(combinator, *other_qs, all=all)  # type: ignore[misc,no-any-return]

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
        if not objs:
            return 0
        scoped = self.filter(**_tenant_filter({o.tenant_id for o in objs}))
        return super(TenantScopedQuerySet, scoped).bulk_update(objs, fields, batch_size=batch_size)


class TenantScopedManager(models.Manager.from_queryset(TenantScopedQuerySet)):  # type: ignore[misc]
    """The default manager of a tenant-owned model (``TenantScopedQuerySet``)."""


class TenantOwned(models.Model):
    """The base of a model distributed by tenant (docs/operations/scale-out.md): the statements
    Django makes for one row name the row's tenant too, so that they reach one shard. ``save()``
    updates ``WHERE id = %s AND tenant_id = %s`` (Django's own names the primary key alone), and
    ``refresh_from_db()``, which also loads a deferred field, reads the same way. A row whose
    ``tenant_id`` was deferred is read by its key alone."""

    tenant_id: Any

    class Meta:
        abstract = True

    def _do_update(self, base_qs: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        tenant_id = self.__dict__.get("tenant_id")
        if tenant_id is not None:
            base_qs = base_qs.filter(tenant_id=tenant_id)
        return super()._do_update(base_qs, *args, **kwargs)

    def refresh_from_db(
        self, using: str | None = None, fields: Any = None, from_queryset: Any = None
    ) -> None:
        tenant_id = self.__dict__.get("tenant_id")
        if from_queryset is None and tenant_id is not None:
            rows: Any = type(self)._base_manager.db_manager(using, hints={"instance": self})
            from_queryset = rows.filter(tenant_id=tenant_id)
        super().refresh_from_db(using, fields, from_queryset)


def across_tenants(queryset: models.QuerySet, reason: str) -> models.QuerySet:
    """``queryset.across_tenants(reason)`` for a tenant-owned model's queryset, else ``queryset``
    unchanged (code shared by tenant-owned models and others, such as the console's base admin)."""
    if isinstance(queryset, TenantScopedQuerySet):
        return queryset.across_tenants(reason)
    return queryset


class _ReadsWithTenant:
    """What a foreign key between two models distributed by tenant reads (``turn.episode``,
    ``prefetch_related("episode")``), read with the tenant of the rows that name it: Django's own
    reads by the key alone."""

    field: Any

    def get_object(self, instance: Any) -> Any:
        tenant_id = instance.__dict__.get("tenant_id")
        if tenant_id is None:
            return super().get_object(instance)  # type: ignore[misc]
        rows = self.get_queryset(instance=instance).filter(tenant_id=tenant_id)  # type: ignore[attr-defined]
        return rows.get(self.field.get_reverse_related_filter(instance))

    def get_prefetch_querysets(self, instances: list[Any], querysets: Any = None) -> Any:
        tenants = {i.__dict__.get("tenant_id") for i in instances}
        if instances and None not in tenants:
            rows = querysets[0] if querysets else self.get_queryset()  # type: ignore[attr-defined]
            querysets = [rows.filter(**_tenant_filter(tenants))]
        return super().get_prefetch_querysets(instances, querysets)  # type: ignore[misc]


class _ForwardWithTenant(_ReadsWithTenant, ForwardManyToOneDescriptor):
    pass


class _ReverseWithTenant(ReverseManyToOneDescriptor):
    """``prefetch_related("turns")`` of rows distributed by tenant: Django adds its filter on the
    rows' keys to the query itself (``add_q``, past ``filter``), so the query is given their
    tenants first (which also scopes it: ``TenantScopedQuerySet``). The related manager of one row
    filters through ``filter`` and needs nothing more."""

    @cached_property
    def related_manager_cls(self) -> Any:
        base: Any = super().related_manager_cls

        class RelatedManager(base):  # type: ignore[misc,valid-type]
            def get_prefetch_querysets(self, instances: list[Any], querysets: Any = None) -> Any:
                tenants = {i.__dict__.get("tenant_id") for i in instances}
                if instances and None not in tenants:
                    rows = querysets[0] if querysets else self.model._default_manager.get_queryset()
                    querysets = [rows.filter(**_tenant_filter(tenants))]
                return super().get_prefetch_querysets(instances, querysets)

        return RelatedManager


class TenantForeignKey(models.ForeignKey):  # type: ignore[type-arg]
    """A foreign key from one model distributed by tenant to another (``Turn.episode``): the row it
    names is read with the tenant (``_ReadsWithTenant``), and so are the rows that name one row
    when prefetched (``_ReverseWithTenant``). Migrations see a plain ``ForeignKey``: the column and
    its constraint are the same."""

    forward_related_accessor_class = _ForwardWithTenant
    related_accessor_class = _ReverseWithTenant

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.ForeignKey", args, kwargs
