"""Writes on tenants and keys."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from .audit import KEY_CREATED, KEY_REVOKED, KEY_ROTATED, audit_record
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
    *,
    tenant: Tenant,
    name: str,
    scopes: Sequence[str] = ("read", "write"),
    expiry_date: datetime | None = None,
    actor: str,
    now: datetime,
) -> tuple[ApiKey, str]:
    """Create a key; the returned secret exists only here (the database keeps a SHA-512 hash)."""
    key = ApiKey(tenant=tenant, name=name[:50], scopes=list(dict.fromkeys(scopes)), expiry_date=expiry_date)
    return key, api_key_add(key=key, actor=actor, now=now)


@transaction.atomic
def api_key_add(*, key: ApiKey, actor: str, now: datetime) -> str:
    """Save ``key``, new and unsaved (from ``api_key_create`` or the console's form), with a fresh
    secret, and record who made it; returns the secret, which exists only here."""
    secret = _save_new(key)
    detail: dict[str, Any] = {"prefix": key.prefix, "name": key.name, "scopes": list(key.scopes)}
    if key.expiry_date is not None:
        detail["expires"] = key.expiry_date
    audit_record(tenant=key.tenant, action=KEY_CREATED, actor=actor, now=now, **detail)
    return secret


@transaction.atomic
def api_key_revoke(*, key: ApiKey, actor: str, now: datetime) -> bool:
    """Revoke ``key`` for good; False when it was revoked already (and nothing is recorded)."""
    if not ApiKey.objects.for_tenant(key.tenant_id).filter(pk=key.pk, revoked=False).update(revoked=True):
        return False
    key.revoked = True
    audit_record(
        tenant=key.tenant, action=KEY_REVOKED, actor=actor, now=now, prefix=key.prefix, name=key.name
    )
    return True


def api_key_rotate(
    *, key: ApiKey, actor: str, now: datetime, grace: timedelta = timedelta(0)
) -> tuple[ApiKey, str]:
    """A new key like ``key`` (its tenant, name and scopes); the old one keeps working for
    ``grace`` and then expires, or is revoked at once when there is no grace. Returns the new key
    and its secret (shown once). One event records both keys."""
    if key.revoked:
        raise ValidationError(f"key {key.prefix} is revoked already; create a new one instead")
    with transaction.atomic():
        new = ApiKey(tenant=key.tenant, name=key.name, scopes=key.scopes)
        secret = _save_new(new)
        if grace > timedelta(0):
            ends = now + grace
            if key.expiry_date is None or key.expiry_date > ends:
                ApiKey.objects.for_tenant(key.tenant_id).filter(pk=key.pk).update(expiry_date=ends)
                key.expiry_date = ends
        else:
            ApiKey.objects.for_tenant(key.tenant_id).filter(pk=key.pk).update(revoked=True)
            key.revoked = True
        audit_record(
            tenant=key.tenant,
            action=KEY_ROTATED,
            actor=actor,
            now=now,
            prefix=key.prefix,
            new_prefix=new.prefix,
            name=key.name,
            grace_minutes=int(grace / timedelta(minutes=1)),
            old_key_ends=now if key.revoked else key.expiry_date,
        )
    return new, secret


def _save_new(key: ApiKey) -> str:
    validate_scopes(key.scopes)
    secret = ApiKey.objects.assign_key(key)
    key.save()
    return secret
