"""Serializer helpers shared by every app's API."""

from __future__ import annotations

import json
from typing import Any

from rest_framework import serializers

from memory_platform.conf import memory_settings
from memory_platform.embeddings import EmbeddingError, validate_vector


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, so a typo is a 400 instead of a silently ignored option."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


class MetadataField(serializers.JSONField):
    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            raise serializers.ValidationError("metadata must be a JSON object")
        size = len(json.dumps(value))
        limit = int(memory_settings.MAX_METADATA_BYTES)
        if size > limit:
            raise serializers.ValidationError(f"metadata is {size} bytes; the limit is {limit}")
        return value


class VectorField(serializers.ListField):
    """A caller-supplied embedding; the tenant's dimension comes from the serializer context."""

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("child", serializers.FloatField())
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, list):
            raise serializers.ValidationError("vector must be a list of numbers")
        tenant = self.context.get("tenant")
        dim = tenant.embedding_dim if tenant is not None else int(memory_settings.EMBEDDING_DIM)
        try:
            return validate_vector(data, dim)
        except EmbeddingError as exc:
            raise serializers.ValidationError(str(exc)) from None


def scope_field() -> serializers.CharField:
    return serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=int(memory_settings.MAX_SCOPE_CHARS),
        trim_whitespace=True,
    )
