from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest
from rest_framework_api_key.admin import APIKeyModelAdmin
from rest_framework_api_key.models import APIKey

from .models import ApiKey, Tenant

# The library's own concrete key model is unused: every key here belongs to a tenant.
if admin.site.is_registered(APIKey):
    admin.site.unregister(APIKey)


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    extra = 0
    fields = ("prefix", "name", "scopes", "revoked", "created", "last_used_at")
    readonly_fields = ("prefix", "name", "scopes", "created", "last_used_at")
    can_delete = False
    show_change_link = False  # a key's primary key holds its hash: never in a URL (access logs)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # keys are created from the API key page, which shows the secret once


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
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


@admin.register(ApiKey)
class ApiKeyAdmin(APIKeyModelAdmin):
    list_display = ("prefix", "name", "tenant", "scopes", "created", "last_used_at", "revoked")  # type: ignore[assignment]
    list_filter = ("revoked", "tenant")  # type: ignore[assignment]
    list_select_related = ("tenant",)
    search_fields = ("name", "prefix", "tenant__name")  # type: ignore[assignment]
    actions = ["revoke_keys"]
    # A key's primary key is "<prefix>.<hash of the secret>", and the admin puts primary keys in
    # URLs, which access logs keep. So no page of one key is linked: the list shows everything, the
    # actions (sent in a POST body) revoke, and creating a key returns to the list.
    list_display_links = None

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: str | None = None) -> Any:
        from django.http import HttpResponseRedirect
        from django.urls import reverse

        # save_model's message shows the secret once; Django's own would link the key's page.
        return HttpResponseRedirect(reverse("admin:tenancy_apikey_changelist"))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        fields = tuple(super().get_readonly_fields(request, obj)) + ("last_used_at",)
        if obj is not None:
            fields += ("tenant",)
        return fields

    @admin.action(description="Revoke selected keys")
    def revoke_keys(self, request: HttpRequest, queryset: Any) -> None:
        count = queryset.filter(revoked=False).update(revoked=True)
        self.message_user(request, f"revoked {count} key(s)", messages.SUCCESS)
