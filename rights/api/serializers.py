"""What the data-rights endpoints read: ``POST /forget``'s body (export's query is beside its view)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

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
