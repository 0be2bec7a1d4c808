from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html
from rest_framework_api_key.admin import APIKeyModelAdmin
from rest_framework_api_key.models import APIKey
from unfold.admin import ModelAdmin, TabularInline

from ..admin_base import ReadOnlyAdmin, TenantScopedAdmin, admin_actor
from .audit import key_uses_of
from .models import SCOPES, ApiKey, AuditEvent, Tenant, TenantOperator
from .scoping import across_tenants
from .services import api_key_add, api_key_revoke, api_key_rotate

#: The grace periods the console offers a rotated key: (minutes, label).
GRACES = ((0, "none: revoke the old key now"), (60, "1 hour"), (24 * 60, "1 day"), (7 * 24 * 60, "7 days"))


class OnPageOnly(str):
    """A new secret for a template: rendered as itself, but shown as ``'<secret>'`` by ``repr``,
    which a failed variable lookup uses to put the whole context in django.template's debug log."""

    def __repr__(self) -> str:
        return "'<secret>'"


# The library's own concrete key model is unused: every key here belongs to a tenant.
if admin.site.is_registered(APIKey):
    admin.site.unregister(APIKey)


class ApiKeyInline(TabularInline):
    model = ApiKey
    extra = 0
    fields = ("prefix", "name", "scopes", "revoked", "created", "last_used_at")
    # Revoked from the API key list only, whose action records who did it (audit).
    readonly_fields = ("prefix", "name", "scopes", "revoked", "created", "last_used_at")
    can_delete = False
    show_change_link = False  # a key's primary key holds its hash: never in a URL (access logs)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # keys are created from the API key page, which shows the secret once


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_lookup = "pk"

    list_display = ("name", "id", "embedder", "is_active", "created_at")
    list_filter = ("is_active", "embedder")
    search_fields = ("name", "id")
    readonly_fields = ("id", "created_at")
    inlines = [ApiKeyInline]
    fieldsets = (
        (None, {"fields": ("id", "name", "is_active", "rate_limit", "created_at")}),
        (
            "Embeddings",
            {
                "fields": (
                    "embedder",
                    "embedding_dim",
                    "embedder_url",
                    "embedder_model",
                    "embedder_key",
                    "embedder_send_dimensions",
                ),
                "description": "The embedder and its dimension are chosen when the tenant is created. "
                "The openai embedder's URL and key can change later (a moved server, a rotated key).",
            },
        ),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        fields = tuple(super().get_readonly_fields(request, obj))
        if obj is not None:
            # The stored vectors were made by this embedder, model and dimension.
            fields += ("embedder", "embedding_dim", "embedder_model", "embedder_send_dimensions")
        return fields


#: What each scope lets a key do, as the key form offers them.
SCOPE_CHOICES = {
    "read": "read: search, context and reading memories",
    "write": "write: adding turns and memories, pinning, forgetting, links",
    "admin": "admin: the policy, the review queue, export, import and erasure",
}


class ApiKeyForm(forms.ModelForm):
    """A key's scopes as boxes to tick, one per scope the API knows (``models.SCOPES``)."""

    scopes = forms.MultipleChoiceField(
        choices=[(scope, SCOPE_CHOICES.get(scope, scope)) for scope in SCOPES],
        widget=forms.CheckboxSelectMultiple,
        initial=["read", "write"],
        help_text="A request needs its endpoint's scope; give a key the fewest it needs.",
    )

    class Meta:
        model = ApiKey
        fields = ("name", "tenant", "scopes", "expiry_date")


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin, APIKeyModelAdmin):
    list_display = (  # type: ignore[assignment]
        "prefix",
        "name",
        "tenant",
        "scopes",
        "created",
        "last_used_at",
        "uses",
        "expiry_date",
        "status",
    )
    list_filter = ("revoked", "tenant")  # type: ignore[assignment]
    list_select_related = ("tenant",)
    search_fields = ("name", "prefix", "tenant__name")  # type: ignore[assignment]
    actions = ["revoke_keys", "rotate_keys"]
    # A key's primary key is "<prefix>.<hash of the secret>", and the admin puts primary keys in
    # URLs, which access logs keep. So no page of one key is linked: the list shows everything, the
    # actions (sent in a POST body) revoke, and creating a key returns to the list.
    list_display_links = None

    @admin.display(description="status", ordering="revoked")
    def status(self, key: ApiKey) -> str:
        """In words: a boolean column drew a red cross beside every key in use and a green tick
        beside a revoked one."""
        return "revoked" if key.revoked else "active"

    change_list_template = "admin/tenancy/apikey/change_list.html"
    form = ApiKeyForm

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # A new key is not revoked: the box shows on an existing key's page only (read-only
        # there: the action revokes, and records who did).
        fields = ["name", "tenant", "scopes", "expiry_date"]
        return fields if obj is None else ["prefix", *fields, "revoked", "last_used_at"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any = None, change: bool = False) -> None:
        if obj.pk:
            obj.save()
            return
        secret = api_key_add(key=obj, actor=admin_actor(request), now=timezone.now())
        messages.warning(
            request,
            format_html(
                'The API key {} for {} is: <code class="secret">{}</code> '
                '<button type="button" class="copy-secret button">Copy</button> '
                "Store it somewhere safe: it is not shown again.",
                obj.prefix,
                obj.tenant.name,
                secret,
            ),
        )

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: str | None = None) -> Any:
        from django.http import HttpResponseRedirect
        from django.urls import reverse

        # save_model's message shows the secret once; Django's own would link the key's page.
        return HttpResponseRedirect(reverse("admin:tenancy_apikey_changelist"))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        fields = tuple(super().get_readonly_fields(request, obj)) + ("last_used_at",)
        if obj is not None:
            fields += ("tenant", "revoked")  # a key is revoked by the action, which records it
        return fields

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        # The counts of every tenant on the page in one Redis round trip, not one per row.
        uses = key_uses_of({key.tenant_id for key in changelist.result_list})
        for key in changelist.result_list:
            key.use_count = uses.get(key.prefix, 0)
        return changelist

    @admin.display(description="uses")
    def uses(self, key: ApiKey) -> int:
        """Authenticated requests made with the key (``audit.key_uses``)."""
        return int(getattr(key, "use_count", 0))

    @admin.action(description="Rotate selected keys (new secrets; the old keys work for a grace period)")
    def rotate_keys(self, request: HttpRequest, queryset: Any) -> TemplateResponse:
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "title": "Rotate API keys",
            "opts": self.model._meta,
            "graces": GRACES,
        }
        if request.POST.get("grace") not in {str(minutes) for minutes, _ in GRACES}:
            # First the grace period to give the old keys.
            context["keys"] = queryset.select_related("tenant")
            context["selected"] = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
            return TemplateResponse(request, "admin/tenancy/apikey/rotate.html", context)
        grace = timedelta(minutes=int(request.POST["grace"]))
        rotated, now, actor = [], timezone.now(), admin_actor(request)
        for key in queryset.select_related("tenant").order_by("created"):
            try:
                new, secret = api_key_rotate(key=key, actor=actor, now=now, grace=grace)
            except ValidationError as exc:
                self.message_user(request, f"{key.prefix}: {'; '.join(exc.messages)}", messages.WARNING)
                continue
            rotated.append(
                {
                    "old": key,
                    "new": new,
                    "secret": OnPageOnly(secret),
                    "until": now + grace if grace else None,
                }
            )
        context["rotated"] = rotated
        # The secrets are in this answer only (the admin's pages are never cached): never in a URL,
        # a message kept in the session, or a log.
        return TemplateResponse(request, "admin/tenancy/apikey/rotated.html", context)

    @admin.action(description="Revoke selected keys")
    def revoke_keys(self, request: HttpRequest, queryset: Any) -> None:
        now, actor = timezone.now(), admin_actor(request)
        keys = queryset.filter(revoked=False).select_related("tenant").order_by("created")
        count = sum(api_key_revoke(key=key, actor=actor, now=now) for key in keys)
        self.message_user(request, f"revoked {count} key(s)", messages.SUCCESS)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Who created, rotated or revoked a tenant's keys, exported, imported or erased its data, and
    when (``audit.audit_record``); policy changes are on each policy's page."""

    list_display = ("at", "tenant", "action", "actor", "details")
    list_filter = ("action", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("actor", "detail__prefix")
    date_hierarchy = "at"

    @admin.display(description="detail")
    def details(self, event: AuditEvent) -> str:
        return json.dumps(event.detail, sort_keys=True)


@admin.register(TenantOperator)
class TenantOperatorAdmin(ModelAdmin):
    """Which staff users run which tenants; only superusers assign them."""

    list_display = ("user", "tenant")
    list_filter = ("tenant",)
    list_select_related = ("user", "tenant")
    autocomplete_fields = ("tenant",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[TenantOperator]:
        queryset = super().get_queryset(request)
        if not request.user.is_superuser:
            return queryset.none()
        return across_tenants(queryset, "console: a superuser assigns operators to every tenant")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)
