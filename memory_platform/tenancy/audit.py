"""The audit of a tenant: who created, rotated and revoked its keys, who exported, imported or
erased its data, and when (``AuditEvent``, read by operators in the console); and how often each of
its keys was used.

An event's detail holds counts, key prefixes and filters: never a secret or a memory's text.
Policy changes are recorded with their old and new values by ``lifecycle.services.policy_save``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from memory_platform import counters

from .models import ApiKey, AuditEvent, Tenant

KEY_CREATED = "key_created"
KEY_ROTATED = "key_rotated"
KEY_REVOKED = "key_revoked"
EXPORT = "export"
IMPORT = "import"
ERASURE = "erasure"
FORGET_USER = "forget_user"
#: An operator deleted a tombstone (``episodes.ForgottenUser``): that user_id may write again.
FORGET_USER_LIFTED = "forget_user_lifted"
#: The tenant itself was deleted (``rights.deletion``); the record outlives it and names it.
TENANT_DELETED = "tenant_deleted"

ACTIONS = frozenset(
    {
        KEY_CREATED,
        KEY_ROTATED,
        KEY_REVOKED,
        EXPORT,
        IMPORT,
        ERASURE,
        FORGET_USER,
        FORGET_USER_LIFTED,
        TENANT_DELETED,
    }
)

#: The counter of authenticated requests, labelled with the key's prefix.
KEY_USES = "key_uses"


def audit_record(*, tenant: Tenant, action: str, actor: str, now: datetime, **detail: Any) -> AuditEvent:
    """Record that ``actor`` ("admin:<user>", "api:<key prefix>", "cli", "service") did ``action``
    to ``tenant`` at ``now``; ``detail`` is stored as JSON."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}; known: {sorted(ACTIONS)}")
    # A long admin user name is cut rather than losing the record of what it did.
    return AuditEvent.objects.create(tenant=tenant, at=now, actor=actor[:100], action=action, detail=detail)


def _uses_scope(tenant_id: object) -> str:
    # Not the tenant's own scope: an erasure of its data wipes that one, and a key's use is not data.
    return f"keys:{tenant_id}"


def key_uses_erase(tenant_id: object) -> int:
    """Remove the counts of a tenant's keys' uses (the tenant is deleted, its keys with it); returns
    the keys removed."""
    return counters.erase(_uses_scope(tenant_id))


def key_uses_held(tenant_id: object) -> bool:
    """Whether Redis still holds counts of a tenant's keys' uses (a deletion's check)."""
    return bool(counters.exists(_uses_scope(tenant_id)))


def key_used(key: ApiKey) -> None:
    """Count one authenticated request of ``key`` (buffered: no round trip on the request path)."""
    counters.add(_uses_scope(key.tenant_id), KEY_USES, key=key.prefix)


def key_uses(tenant: Tenant) -> dict[str, int]:
    """The requests each of the tenant's keys made, by key prefix (a key never used is missing)."""
    return key_uses_of([tenant.pk])


def key_uses_of(tenant_ids: Iterable[object]) -> dict[str, int]:
    """``key_uses`` of several tenants in one Redis round trip (a page of the console's key list)."""
    scopes = {_uses_scope(pk) for pk in tenant_ids}
    uses: dict[str, int] = {}
    if not scopes:
        return uses
    for metrics in counters.read(scopes).values():
        for labels, count in metrics.get(KEY_USES, counters.Series()).values.items():
            uses[dict(labels)["key"]] = int(count)
    return uses
