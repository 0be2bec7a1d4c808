"""Writes on tenants and keys."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
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


def api_key_rotate(*, key: ApiKey, now: datetime, grace: timedelta = timedelta(0)) -> tuple[ApiKey, str]:
    """A new key like ``key`` (its tenant, name and scopes); the old one keeps working for
    ``grace`` and then expires, or is revoked at once when there is no grace. Returns the new key
    and its secret (shown once)."""
    if key.revoked:
        raise ValidationError(f"key {key.prefix} is revoked already; create a new one instead")
    with transaction.atomic():
        new, secret = api_key_create(tenant=key.tenant, name=key.name, scopes=key.scopes)
        if grace > timedelta(0):
            ends = now + grace
            if key.expiry_date is None or key.expiry_date > ends:
                ApiKey.objects.filter(pk=key.pk).update(expiry_date=ends)
        else:
            api_key_revoke(key=key)
    return new, secret
