"""Writes on tenants and keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from .models import ApiKey, Tenant, validate_scopes

EMBEDDER_OPTIONS = (
    "embedder_url",
    "embedder_model",
    "embedder_key",
    "embedding_dim",
    "embedder_send_dimensions",
)


@transaction.atomic
def tenant_create(*, name: str, embedder: str | None = None, **embedder_options: Any) -> Tenant:
    """A new tenant; ``embedder_options`` are the ``openai`` embedder's fields (``embedder_url``,
    ``embedder_model``, ``embedder_key``, ``embedding_dim``, ``embedder_send_dimensions``)."""
    unknown = set(embedder_options) - set(EMBEDDER_OPTIONS)
    if unknown:
        raise TypeError(f"unknown embedder options {sorted(unknown)}")
    tenant = Tenant(name=name, **{k: v for k, v in embedder_options.items() if v is not None})
    if embedder:
        tenant.embedder = embedder
    tenant.full_clean()
    tenant.save()
    return tenant


def api_key_create(
    *, tenant: Tenant, name: str, scopes: Sequence[str] = ("read", "write")
) -> tuple[ApiKey, str]:
    """Create a key; the returned secret exists only here (the database keeps a SHA-512 hash)."""
    scopes = list(dict.fromkeys(scopes))
    validate_scopes(scopes)
    return ApiKey.objects.create_key(tenant=tenant, name=name[:50], scopes=scopes)  # type: ignore[return-value]


def api_key_revoke(*, key: ApiKey) -> None:
    ApiKey.objects.filter(pk=key.pk).update(revoked=True)
