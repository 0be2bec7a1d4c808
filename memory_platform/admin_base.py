"""Admin pieces every app shares, on the console's theme (unfold's ``ModelAdmin`` and inlines,
docs/decisions/0051-console-on-unfold.md)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Field, QuerySet
from django.http import HttpRequest
from unfold.admin import ModelAdmin, TabularInline

from memory_platform.tenancy.models import Tenant, TenantOperator
from memory_platform.tenancy.scoping import across_tenants


def admin_actor(request: HttpRequest) -> str:
    """Who a console change is recorded as, in the journal and the policy's changes."""
    return f"admin:{request.user.get_username()}"


def operated_tenants(request: HttpRequest) -> frozenset[Any] | None:
    """The primary keys of the tenants the console's user may see, or None for all (a superuser).
    A staff user sees the tenants they operate (``TenantOperator``), and none without any."""
    user = request.user
    if getattr(user, "is_superuser", False):
        return None
    cached = getattr(request, "_operated_tenants", None)
    if cached is None:
        pk = user.pk
        operated = (
            TenantOperator.objects.across_tenants("console: which tenants a staff user operates").filter(
                user_id=pk
            )
            if pk is not None
            else TenantOperator.objects.none()
        )
        cached = frozenset(operated.values_list("tenant_id", flat=True))
        request._operated_tenants = cached  # type: ignore[attr-defined]
    return cached


def operated_rows(
    request: HttpRequest, queryset: QuerySet[Any], tenant_lookup: str = "tenant_id"
) -> QuerySet[Any]:
    """A tenant-owned ``queryset`` cut to the tenants the console's user operates (every tenant's
    rows for a superuser): the one place the console crosses tenants."""
    ids = operated_tenants(request)
    if ids is None:
        return across_tenants(queryset, "console: a superuser sees every tenant")
    return queryset.filter(**{f"{tenant_lookup}__in": ids})


def visible_tenants(request: HttpRequest) -> QuerySet[Tenant]:
    ids = operated_tenants(request)
    return Tenant.objects.all() if ids is None else Tenant.objects.filter(pk__in=ids)


class TenantListFilter(admin.RelatedOnlyFieldListFilter):
    """The tenants that have rows in the (already scoped) list. Their keys are read apart, not as a
    subquery of the tenants' list as Django's filter does, so the statement on the tenant-owned
    table is the list's own: the operator's tenants, or a superuser's ``across_tenants``."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> Any:
        rows = model_admin.get_queryset(request).order_by()
        keys = set(rows.values_list(f"{self.field_path}__pk", flat=True).distinct())
        ordering = self.field_admin_ordering(field, request, model_admin)
        return field.get_choices(include_blank=False, limit_choices_to={"pk__in": keys}, ordering=ordering)


class TenantScopedAdmin(ModelAdmin):
    """Rows of the tenants the user operates, and nothing else: lists, pages by id, the tenant
    filter's choices and the tenant field of forms (``operated_tenants``)."""

    #: The lookup from this model to its tenant's primary key.
    tenant_lookup = "tenant_id"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return operated_rows(request, super().get_queryset(request), self.tenant_lookup)

    def get_list_filter(self, request: HttpRequest) -> Any:
        # Only the tenants that have rows in this (already scoped) list are offered.
        return [
            ("tenant", TenantListFilter) if entry == "tenant" else entry
            for entry in super().get_list_filter(request)
        ]

    def formfield_for_foreignkey(self, db_field: Field, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "tenant" and operated_tenants(request) is not None:
            kwargs["queryset"] = visible_tenants(request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[arg-type]


class ReadOnlyAdmin(TenantScopedAdmin):
    """Rows the platform writes itself (raw turns, journal, tick runs): operators read them."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(TabularInline):
    """Rows shown on another's page that no hand may add, change or delete there (an episode's
    turns, its links): a change made there would be in no journal."""

    extra = 0
    can_delete = False
    #: The theme titles each row with the row's name, which repeats (cut) what its cells show.
    hide_title = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class SuperusersOnly:
    """Rows that belong to every tenant at once and to none the console can tell, such as the task
    queue's tasks, schedules and failures (their arguments and results name any tenant's ids):
    a superuser's alone. Mixed in before the model's own admin class."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _is_superuser(request) and super().has_module_permission(request)  # type: ignore[misc]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _is_superuser(request) and super().has_view_permission(request, obj)  # type: ignore[misc]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return _is_superuser(request) and super().has_add_permission(request, *args)  # type: ignore[misc]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _is_superuser(request) and super().has_change_permission(request, obj)  # type: ignore[misc]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _is_superuser(request) and super().has_delete_permission(request, obj)  # type: ignore[misc]


def _is_superuser(request: HttpRequest) -> bool:
    return bool(getattr(request.user, "is_superuser", False))
