"""Tenants (agent teams) and their API keys."""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone
from rest_framework_api_key.models import AbstractAPIKey, BaseAPIKeyManager

from memory_platform.conf import DEFAULTS, memory_settings
from memory_platform.openai_compat import validate_base_url
from memory_platform.ratelimit import Rate
from memory_platform.tenancy.scoping import TenantScopedManager, TenantScopedQuerySet

SCOPES = ("read", "write", "admin")


def default_embedder() -> str:
    return str(memory_settings.EMBEDDER)


def validate_rate(value: str) -> None:
    try:
        Rate.parse(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


class Tenant(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100, unique=True)
    embedder = models.CharField(
        max_length=200,
        default=default_embedder,
        help_text="Embedding provider: 'local' (all-MiniLM-L6-v2, offline, English), 'openai' (any "
        "OpenAI-compatible /embeddings server, set below), 'provided' (caller sends vectors) or a "
        "dotted path to a provider class. Fixed once the tenant holds vectors.",
    )
    embedding_dim = models.PositiveIntegerField(
        default=DEFAULTS["EMBEDDING_DIM"],
        help_text="Dimensions of the tenant's vectors: what its openai model answers (at most the "
        "platform's EMBEDDING_DIM; narrower vectors are stored zero-padded); the platform's for the others.",
    )
    # the `openai` embedder (memory_platform.embeddings.openai)
    embedder_url = models.CharField(
        max_length=500,
        blank=True,
        default="",
        validators=[validate_base_url],
        help_text="openai embedder: base URL, e.g. http://tei:8080/v1 (POSTs to <base>/embeddings)",
    )
    embedder_model = models.CharField(
        max_length=200, blank=True, default="", help_text="openai embedder: model"
    )
    embedder_key = models.CharField(
        max_length=500, blank=True, default="", help_text="openai embedder: sent as a Bearer token"
    )
    embedder_send_dimensions = models.BooleanField(
        default=False,
        help_text="openai embedder: ask for embedding_dim dimensions in each request (OpenAI's "
        "'dimensions', for models that shorten their vectors, such as text-embedding-3-*)",
    )
    is_active = models.BooleanField(default=True)
    rate_limit = models.CharField(
        max_length=20,
        blank=True,
        default="",
        validators=[validate_rate],
        help_text="Requests each of its API keys may make, N/s or N/min; empty: the platform's "
        "MEMORY_RATE_LIMIT.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    #: Counts the moves of the tenant's episodes between layers (``lifecycle.transitions``): a
    #: process recounts the split of its turns between the tiers, which it caches, when this
    #: changes (``episodes.stores.archive.turn_counts``). Defaulted in the database too, so a
    #: process of the previous release can still create tenants during an upgrade.
    layers_version = models.BigIntegerField(default=0, db_default=0, editable=False)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        width = int(DEFAULTS["EMBEDDING_DIM"])
        if self.embedder == "openai":
            errors = {
                name: f"{name} is required with the openai embedder."
                for name in ("embedder_url", "embedder_model")
                if not getattr(self, name)
            }
            if not 1 <= self.embedding_dim <= width:
                errors["embedding_dim"] = f"embedding_dim must be 1-{width} (the platform's stored width)."
            if errors:
                raise ValidationError(errors)
        elif self.embedding_dim != width:
            raise ValidationError(
                {"embedding_dim": f"only an openai tenant sets its dimension; this one uses {width}."}
            )

    @property
    def key_prefix(self) -> str:
        """The Redis hash tag of this tenant: its keys share one cluster slot
        (docs/concepts.md#where-things-live)."""
        return self.id.hex


def validate_scopes(value: list[str]) -> None:
    unknown = sorted(set(value) - set(SCOPES))
    if unknown:
        raise ValidationError(f"unknown scope(s) {unknown}; allowed: {list(SCOPES)}")
    if not value:
        raise ValidationError("a key needs at least one scope")


def default_scopes() -> list[str]:
    return ["read", "write"]


class ApiKeyManager(BaseAPIKeyManager.from_queryset(TenantScopedQuerySet)):  # type: ignore[misc]
    def get_usable_keys(self) -> models.QuerySet:
        # A key is looked up before its tenant is known: the key names the tenant.
        usable = self.get_queryset().across_tenants("authentication: a key names its own tenant")
        return usable.filter(revoked=False, tenant__is_active=True).select_related("tenant")


class ApiKey(AbstractAPIKey):
    """A hashed, prefixed key bound to one tenant. The secret is shown once and never stored."""

    objects: ClassVar[ApiKeyManager] = ApiKeyManager()  # type: ignore[assignment]

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    scopes = ArrayField(
        models.CharField(max_length=10),
        default=default_scopes,
        validators=[validate_scopes],
        help_text="read: search and read; write: ingest and manage memories; admin: everything.",
    )
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta(AbstractAPIKey.Meta):
        verbose_name = "API key"
        verbose_name_plural = "API keys"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scopes__contained_by=list(SCOPES)) & ~models.Q(scopes=[]),
                name="apikey_scopes_known",
            )
        ]

    def has_scope(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes


class TenantOperator(models.Model):
    """A staff user who runs some tenants only: the console shows and changes theirs and nothing of
    the others (``memory_platform.admin_base.TenantScopedAdmin``). Superusers see every tenant; a
    staff user with no tenant here sees none."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="operated")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="operators")

    objects = TenantScopedManager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="operator_once_per_tenant")]

    def __str__(self) -> str:
        return f"{self.user} operates {self.tenant.name}"


class AuditEvent(models.Model):
    """Who did what to a tenant's keys and data, and when: keys created, rotated and revoked;
    exports, imports and erasures (``memory_platform.tenancy.audit``). Policy changes have their
    own record (``lifecycle.models.PolicyChange``). The detail holds counts, key prefixes and
    filters: never a secret or a memory's text. A record outlives its tenant: deleting the tenant
    leaves its records without one, and its ``tenant_deleted`` record names it in the detail."""

    tenant = models.ForeignKey(
        Tenant, on_delete=models.SET_NULL, null=True, blank=True, related_name="audit_events"
    )
    at = models.DateTimeField()
    actor = models.CharField(max_length=100, help_text="admin:<user>, api:<key prefix>, cli, service")
    action = models.CharField(max_length=40)
    detail = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)

    objects = TenantScopedManager()

    class Meta:
        ordering = ("-at", "-id")
        indexes = [models.Index(fields=["tenant", "-at"], name="auditevent_tenant_at")]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor} at {self.at:%Y-%m-%d %H:%M}"
