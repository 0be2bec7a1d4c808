"""Deleting a tenant from the console: a superuser's alone, through the deletion service
(``rights.deletion``), which takes its memory from every store and leaves an audit record.

Django's own delete would list every row the tenant holds (a slow page for thousands of turns) and
ask for the delete permission of each model, which the platform's rows grant nobody; so the
confirmation page shows counts, and the delete calls the service.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import actions as admin_actions
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from memory_platform.admin_base import admin_actor
from memory_platform.tenancy.admin import TenantAdmin as TenancyTenantAdmin
from memory_platform.tenancy.models import Tenant
from rights.deletion import DeletionRefused, counted, tenant_delete
from rights.erasure import tenant_holdings

#: How long a delete from the console waits for a running tick of the tenant (a request's time).
TICK_WAIT_SECONDS = 30.0
_REFUSED = "_tenant_deletion_refused"


class TenantAdmin(TenancyTenantAdmin):
    actions = ["delete_selected"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return bool(user.is_active and getattr(user, "is_superuser", False))

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        """What the confirmation page lists: each tenant with the counts of what it holds."""
        listed: list[Any] = []
        for tenant in objs:
            held = [counted(label, n) for label, n in tenant_holdings(tenant).items() if n]
            listed.append(format_html("Tenant: {} ({})", tenant.name, tenant.pk))
            listed.append(held or ["no memory"])
        return listed, {"tenants": len(objs)}, set(), []

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        if not self._delete(request, [obj]):
            setattr(request, _REFUSED, True)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._delete(request, list(queryset))

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> HttpResponse:
        if getattr(request, _REFUSED, False):
            return HttpResponseRedirect(reverse("admin:tenancy_tenant_change", args=[obj_id]))
        return super().response_delete(request, obj_display, obj_id)

    @admin.action(permissions=["delete"], description="Delete selected tenants and all they hold")
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        if request.POST.get("post"):
            self._delete(request, list(queryset))
            return None
        return admin_actions.delete_selected(self, request, queryset)  # the confirmation page

    def _delete(self, request: HttpRequest, tenants: list[Tenant]) -> bool:
        """Delete each tenant through the service and say what went; False if any was refused."""
        actor, done = admin_actor(request), True
        for tenant in tenants:
            try:
                deletion = tenant_delete(
                    tenant=tenant, now=timezone.now(), actor=actor, tick_wait=TICK_WAIT_SECONDS
                )
            except DeletionRefused as exc:
                self.message_user(request, f"{tenant.name} was not deleted: {exc}", messages.ERROR)
                done = False
                continue
            removed = deletion.erasure.removed
            postgres = removed.get("postgres", {})
            self.message_user(
                request,
                f"deleted tenant {deletion.tenant}: "
                + ", ".join(
                    [counted(label, n) for label, n in postgres.items() if n]
                    + [f"{removed.get('redis', {}).get('documents', 0)} hot documents"]
                )
                + f"; audit record {deletion.audit_id}",
                messages.SUCCESS if deletion.clean else messages.WARNING,
            )
        return done


if admin.site.is_registered(Tenant):
    admin.site.unregister(Tenant)
admin.site.register(Tenant, TenantAdmin)
