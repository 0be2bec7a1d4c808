"""The policy's JSON: what ``GET /policy`` answers and ``PATCH /policy`` reads, an export's policy
line and what an import takes from it. Each field's own bounds are in the schema; rules between
fields are the model's ``clean`` (a 409 over the API, a format error in an import)."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from fsrs.scheduler import DEFAULT_PARAMETERS
from rest_framework import serializers

from memory_platform.api.serializers import StrictSerializer

from .models import MemoryPolicy
from .policy import (
    DAY_FIELDS,
    MAX_DAYS,
    NONNEG_FIELDS,
    POSITIVE_FIELDS,
    POSITIVE_FLOAT_MIN,
    UNIT_FIELDS,
)

_INTEGERS = {
    f.name for f in MemoryPolicy._meta.concrete_fields if f.get_internal_type().endswith("IntegerField")
}
#: Each field's own bounds (the model's ``clean`` states them for the console's form).
_BOUNDS: dict[str, dict[str, Any]] = {
    **{name: {"min_value": 0} for name in NONNEG_FIELDS},
    **{name: {"min_value": 0, "max_value": 1} for name in UNIT_FIELDS},
    **{name: {"min_value": 1} for name in POSITIVE_FIELDS if name in _INTEGERS},
    **{name: {"max_value": MAX_DAYS} for name in DAY_FIELDS},
}


_BASE_URL = r"^(https?://[^/\s?#:@]+\S*)?$"


@extend_schema_field({"type": "string", "maxLength": 500, "pattern": _BASE_URL})
class _BaseUrlField(serializers.Field):
    """An http(s) URL with a host, or empty (``openai_compat.validate_base_url``'s rule)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str) or len(data) > 500 or not re.match(_BASE_URL, data):
            raise serializers.ValidationError(
                "must be an http(s) URL with a host, or empty (at most 500 characters)"
            )
        return data

    def to_representation(self, value: Any) -> str:
        return str(value)


class _PositiveFloat(serializers.FloatField):
    def __init__(self, **kwargs: Any):
        super().__init__(min_value=POSITIVE_FLOAT_MIN, **kwargs)


@extend_schema_field({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})
class _OpenUnitFloat(serializers.FloatField):
    def to_internal_value(self, data: Any) -> float:
        value = super().to_internal_value(data)
        if not 0 < value < 1:
            raise serializers.ValidationError("must be strictly between 0 and 1")
        return value


class PolicySerializer(StrictSerializer, serializers.ModelSerializer):
    """The tenant's policy: every tunable (docs/concepts.md); the LLM key is write-only.

    Each field's own rule is in the schema (a value that breaks it is a 400); a rule between
    fields (``hot_days`` below ``cold_days``, the priority weights adding up to at most 1, an LLM
    summariser needing its URL and model) or the FSRS-6 parameters' bounds make a 409."""

    llm_base_url = _BaseUrlField(required=False)

    class Meta:
        model = MemoryPolicy
        exclude = ("id", "tenant")
        read_only_fields = ("updated_at",)
        extra_kwargs = {"llm_api_key": {"write_only": True}, **_BOUNDS}

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        # bounds DRF's min_value and max_value cannot say (exclusive ones), and the FSRS list
        fields["desired_retention"] = _OpenUnitFloat(required=False)
        for name in POSITIVE_FIELDS:
            if name not in _INTEGERS:
                fields[name] = _PositiveFloat(required=False, max_value=1 if name in UNIT_FIELDS else None)
        fields["fsrs_parameters"] = serializers.ListField(
            child=serializers.FloatField(),
            min_length=len(DEFAULT_PARAMETERS),
            max_length=len(DEFAULT_PARAMETERS),
            required=False,
        )
        return fields
