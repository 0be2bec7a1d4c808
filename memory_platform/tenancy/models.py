"""Tenants (agent teams) and their API keys."""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from rest_framework_api_key.models import AbstractAPIKey, BaseAPIKeyManager

from memory_platform.conf import DEFAULTS, memory_settings
from memory_platform.ratelimit import Rate

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
        help_text="Embedding provider: 'local' (MiniLM, offline), 'provided' (caller sends vectors) "
        "or a dotted path to a provider class.",
    )
    embedding_dim = models.PositiveIntegerField(default=DEFAULTS["EMBEDDING_DIM"], editable=False)
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

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name

    @property
    def key_prefix(self) -> str:
        """The Redis hash tag of this tenant: its keys share one cluster slot (DESIGN §1)."""
        return self.id.hex


def validate_scopes(value: list[str]) -> None:
    unknown = sorted(set(value) - set(SCOPES))
    if unknown:
        raise ValidationError(f"unknown scope(s) {unknown}; allowed: {list(SCOPES)}")
    if not value:
        raise ValidationError("a key needs at least one scope")


def default_scopes() -> list[str]:
    return ["read", "write"]


class ApiKeyManager(BaseAPIKeyManager):
    def get_usable_keys(self) -> models.QuerySet:
        return super().get_usable_keys().filter(tenant__is_active=True).select_related("tenant")


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
