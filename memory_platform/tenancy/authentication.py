"""API-key authentication: the key, and only the key, decides the tenant."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from .models import ApiKey

# last_used_at is informational: refresh it at most once a minute per key, so reads stay reads.
LAST_USED_RESOLUTION = timedelta(seconds=60)


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
        try:
            key: ApiKey = ApiKey.objects.get_from_key(secret)  # type: ignore[assignment]
        except ApiKey.DoesNotExist:
            raise exceptions.AuthenticationFailed("invalid or revoked API key") from None
        if key.has_expired:
            raise exceptions.AuthenticationFailed("expired API key")
        now = timezone.now()
        if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        request.tenant = key.tenant  # type: ignore[attr-defined]
        return (None, key)

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'
