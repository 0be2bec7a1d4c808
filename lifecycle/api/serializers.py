from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from fsrs.scheduler import DEFAULT_PARAMETERS
from rest_framework import serializers

from lifecycle.models import MemoryPolicy
from lifecycle.policy import (
    DAY_FIELDS,
    MAX_DAYS,
    NONNEG_FIELDS,
    POSITIVE_FIELDS,
    POSITIVE_FLOAT_MIN,
    UNIT_FIELDS,
)
from memory_platform.api.serializers import StrictSerializer, scope_field

#: What names whose or which memories to forget; `layer`, `older_than` and `anchor` only narrow
#: such a choice (alone they would select nearly everything).
SCOPE_FIELDS = ("kind", "user_id", "agent_id", "session_id", "tags")


#: What a request to erase one person for good holds (``POST /forget`` with ``erase``).
ERASE_FIELDS = ("user_id", "erase", "confirm")


class ForgetInSerializer(StrictSerializer):
    """`POST /forget`: a filter, a retrievability threshold, or both (AND)."""

    kind = serializers.SlugField(required=False, max_length=50)
    user_id = scope_field()
    agent_id = scope_field()
    session_id = scope_field()
    tags = serializers.ListField(
        child=serializers.CharField(max_length=100, min_length=1),
        required=False,
        max_length=50,
        allow_empty=False,
    )
    layer = serializers.ChoiceField(choices=["hot", "warm", "cold"], required=False)
    older_than = serializers.DateTimeField(
        required=False, help_text="episodes that last happened before this"
    )
    anchor = serializers.BooleanField(required=False, allow_null=True, default=None)
    retrievability_below = serializers.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        help_text="forget episodes whose FSRS-6 retrievability is below this now (never anchors)",
    )
    dry_run = serializers.BooleanField(required=False, default=False)
    all = serializers.BooleanField(
        required=False,
        default=False,
        help_text="forget every memory the other fields leave (say so on purpose)",
    )
    erase = serializers.BooleanField(
        required=False,
        default=False,
        help_text="erase everything of `user_id` for good (scope admin; with `user_id` alone): the first "
        "call answers a `confirm` token and changes nothing, a second call with it erases",
    )
    confirm = serializers.CharField(
        required=False, help_text="with `erase`: the token the first call answered"
    )

    # The rule of validate(), for the API schema: a field that names memories, or all: true.
    schema_rules = {
        "anyOf": [
            *({"required": [name], "properties": {name: {"minLength": 1}}} for name in SCOPE_FIELDS[:-1]),
            {"required": ["tags"]},
            {"required": ["retrievability_below"]},
            {"required": ["all"], "properties": {"all": {"const": True}}},
        ],
        # Erasing names one person and nothing else; `confirm` only goes with it.
        "if": {"required": ["erase"], "properties": {"erase": {"const": True}}},
        "then": {
            "required": ["user_id"],
            "properties": {"user_id": {"minLength": 1}},
            "propertyNames": {"enum": list(ERASE_FIELDS)},
        },
        "else": {"not": {"required": ["confirm"]}},
    }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        named = [name for name in SCOPE_FIELDS if attrs.get(name) not in (None, "", [])]
        if attrs["erase"]:
            others = sorted(set(self.initial_data) - set(ERASE_FIELDS))
            if others or not attrs.get("user_id"):
                raise serializers.ValidationError(
                    {"erase": [f"erasing names one person: send user_id (and confirm) alone, not {others}"]}
                )
            return attrs
        if "confirm" in attrs:
            raise serializers.ValidationError({"confirm": ["only with erase"]})
        if not named and "retrievability_below" not in attrs and not attrs["all"]:
            raise serializers.ValidationError(
                {
                    "non_field_errors": [
                        "name whose memories to forget (user_id, agent_id, session_id, kind or tags) or "
                        "give retrievability_below; to forget everything layer, older_than and anchor "
                        'leave, send "all": true (try "dry_run": true first)'
                    ]
                }
            )
        return attrs


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
