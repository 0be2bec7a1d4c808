"""API-key authentication: the key, and only the key, decides the tenant."""

from __future__ import annotations

import functools
import time
from datetime import timedelta

from django.db import connection
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from memory_platform import db

from .audit import key_used
from .login_throttle import api_key_failure
from .models import ApiKey, Tenant

# last_used_at is informational: refresh it at most once a minute per key, so reads stay reads.
LAST_USED_RESOLUTION = timedelta(seconds=60)


@functools.cache
def _key_query() -> tuple[str, list[str], list[str]]:
    """One statement for a key and its tenant (an ORM query with a join costs more to build on
    every request than to run)."""
    quote = connection.ops.quote_name
    key_fields = list(ApiKey._meta.concrete_fields)
    tenant_fields = list(Tenant._meta.concrete_fields)
    columns = f"{db.column_list(key_fields, 'k')}, {db.column_list(tenant_fields, 't')}"
    sql = (
        f"SELECT {columns} FROM {quote(ApiKey._meta.db_table)} k "
        f"JOIN {quote(Tenant._meta.db_table)} t ON t.{quote('id')} = k.{quote('tenant_id')} "
        f"WHERE k.{quote('prefix')} = %s AND NOT k.{quote('revoked')} AND t.{quote('is_active')}"
    )
    return sql, [f.attname for f in key_fields], [f.attname for f in tenant_fields]


def key_for(secret: str) -> ApiKey | None:
    """The usable key (not revoked, tenant active) this secret opens, with its tenant; None when
    there is none or the secret does not match its hash. Same rules as the library's
    ``get_from_key``."""
    prefix, _, _ = secret.partition(".")
    sql, key_names, tenant_names = _key_query()
    row = db.fetch_one(sql, [prefix], tenant=None)
    if row is None:
        return None
    key = ApiKey.from_db(connection.alias, key_names, row[: len(key_names)])
    key.tenant = Tenant.from_db(connection.alias, tenant_names, row[len(key_names) :])
    return key if key.is_valid(secret) else None


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request):  # type: ignore[no-untyped-def]
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, secret = header.partition(" ")
        if scheme.lower() not in {"bearer", "api-key"} or not secret.strip():
            raise exceptions.AuthenticationFailed("use 'Authorization: Bearer <api key>'")
        secret = secret.strip()
        key = key_for(secret)
        if key is None:
            # Past the failure limit an address's invalid keys get 429 (tenancy.login_throttle).
            wait = api_key_failure(request, time.time())
            if wait is not None:
                raise exceptions.Throttled(wait=wait, detail="too many invalid API keys from this address")
            raise exceptions.AuthenticationFailed("invalid or revoked API key")
        if key.has_expired:
            raise exceptions.AuthenticationFailed("expired API key")
        now = timezone.now()
        if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.for_tenant(key.tenant_id).filter(pk=key.pk).update(last_used_at=now)
        key_used(key)  # every request, in Redis: a count in Postgres would make each read a write
        request.tenant = key.tenant  # type: ignore[attr-defined]
        return (None, key)

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'
