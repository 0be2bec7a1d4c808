from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory_platform.api.serializers import (
    NOT_BLANK,
    MetadataField,
    QueryBooleanField,
    StrictSerializer,
    VectorField,
    scope_field,
)
from memory_platform.conf import memory_settings

from .. import public_ids
from ..language import Language
from ..models import LinkKind, Role
from ..scope import OWNER_FIELDS, Scope

#: A memory's id in a path, a body or a cursor, as the schema states it.
MEMORY_ID_SCHEMA = {
    "type": "string",
    "pattern": f"^{public_ids.REFERENCE}$",
    "description": public_ids.DESCRIPTION,
}


@extend_schema_field(
    {
        "oneOf": [
            MEMORY_ID_SCHEMA,
            {"type": "integer", "minimum": 1, "maximum": 10**18 - 1, "description": "an old integer id"},
        ]
    }
)
class MemoryIdField(serializers.Field):
    """A memory named in a body: its public id, or (during the transition) its old integer id."""

    default_error_messages = {"invalid": public_ids.DESCRIPTION}

    def to_internal_value(self, data: Any) -> public_ids.Reference:
        try:
            return public_ids.parse(data)
        except ValueError:
            self.fail("invalid")

    def to_representation(self, value: Any) -> Any:
        return value


def owner_scope(data: dict[str, Any], defaults: dict[str, Any] | None = None) -> Scope:
    """Whose conversation a written turn or memory belongs to: its own fields, else the batch's."""
    defaults = defaults or {}
    return Scope.owner(**{name: data.get(name, defaults.get(name, "")) for name in OWNER_FIELDS})


def filter_scope(data: dict[str, Any], **more: Any) -> Scope:
    """A filter's owner fields (an empty one does not filter), with ``more`` scope fields."""
    owner: dict[str, Any] = {name: data.get(name) or None for name in OWNER_FIELDS}
    return Scope(**owner, **more)


def text_field(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(
        max_length=int(memory_settings.MAX_TURN_CHARS),
        allow_blank=False,
        trim_whitespace=False,
        validators=[RegexValidator(NOT_BLANK, "text is empty")],
        **kwargs,
    )


class ScopeMixin(serializers.Serializer):
    user_id = scope_field()
    agent_id = scope_field()
    session_id = scope_field()


def language_field() -> serializers.ChoiceField:
    return serializers.ChoiceField(
        choices=Language.values,
        required=False,
        help_text="The text's language: en, ru or zh. Without it, the tenant policy's language, or read off "
        "the text's script (Chinese characters, Cyrillic or Latin letters).",
    )


class TurnInSerializer(StrictSerializer, ScopeMixin):
    role = serializers.ChoiceField(choices=[r for r in Role.values if r != Role.MEMORY])
    text = text_field()
    occurred_at = serializers.DateTimeField(required=False)
    metadata = MetadataField(required=False, default=dict)
    episode_boundary = serializers.BooleanField(required=False, default=False)
    vector = VectorField()
    language = language_field()

    def validate_text(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("text is empty")
        return value


class TurnsInSerializer(StrictSerializer, ScopeMixin):
    turns = TurnInSerializer(many=True, allow_empty=False)
    # `async` is a keyword in Python; the field is declared under that name in __init__.
    metadata = MetadataField(required=False, default=dict)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["async"] = serializers.BooleanField(required=False, default=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        tenant = self.context["tenant"]
        if tenant.embedder == "provided":
            missing = [i for i, t in enumerate(attrs["turns"]) if t.get("vector") is None]
            if missing:
                raise serializers.ValidationError(
                    {
                        "turns": f"this tenant uses caller-provided vectors; turns {missing[:10]} have no 'vector'"
                    }
                )
        return attrs


class MemoryInSerializer(StrictSerializer, ScopeMixin):
    text = text_field()
    kind = serializers.SlugField(required=False, default="fact", max_length=50, min_length=1)
    title = serializers.CharField(required=False, allow_blank=True, max_length=200)
    tags = serializers.ListField(
        child=serializers.CharField(max_length=100, min_length=1), required=False, default=list, max_length=50
    )
    metadata = MetadataField(required=False, default=dict)
    anchor = serializers.BooleanField(required=False, default=False)
    occurred_at = serializers.DateTimeField(required=False)
    vector = VectorField()
    language = language_field()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.context["tenant"].embedder == "provided" and attrs.get("vector") is None:
            raise serializers.ValidationError({"vector": "this tenant uses caller-provided vectors"})
        if not attrs["text"].strip():
            raise serializers.ValidationError({"text": "text is empty"})
        return attrs


class LinkInSerializer(StrictSerializer):
    target_id = MemoryIdField()
    kind = serializers.ChoiceField(choices=LinkKind.choices, default=LinkKind.RELATED)


class LinkDeleteSerializer(StrictSerializer):
    target_id = MemoryIdField()
    kind = serializers.ChoiceField(choices=LinkKind.choices, required=False)


class MemoryListQuerySerializer(StrictSerializer):
    from_query = True
    user_id = serializers.CharField(required=False)
    agent_id = serializers.CharField(required=False)
    session_id = serializers.CharField(required=False)
    kind = serializers.CharField(required=False)
    layer = serializers.ChoiceField(choices=["hot", "warm", "cold"], required=False)
    state = serializers.ChoiceField(
        choices=["active", "dormant", "delete_candidate", "forgotten"], required=False
    )
    anchor = QueryBooleanField(required=False)
    tag = serializers.CharField(required=False)
    cursor = serializers.RegexField(
        f"^{public_ids.REFERENCE}$", required=False, help_text="the next_cursor of the previous page"
    )
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)
