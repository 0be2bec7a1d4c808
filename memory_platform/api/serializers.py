"""Serializer helpers shared by every app's API."""

from __future__ import annotations

import copy
import json
from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory_platform.conf import memory_settings
from memory_platform.embeddings import EmbeddingError, to_storage, validate_vector

#: Some character that is not whitespace: the same set in Python's ``re`` (where ``\s`` is what
#: ``str.strip``, DRF's trimming, removes) and in the ECMA regexes of the schema's ``pattern``, whose
#: ``\s`` leaves out U+001C-U+001F and U+0085 and takes in U+FEFF. Written ``\S``, a schema would
#: call a text of U+001F valid and the server would refuse it as blank.
NOT_BLANK = r"[^\s\x1c-\x1f\x85]|\ufeff"

# JSON types each field takes as they are: DRF would turn 0 into "0" for a text field, or "5" into 5.
_JSON_TYPES: tuple[tuple[type, tuple[type, ...], str], ...] = (
    (serializers.BooleanField, (bool,), "a boolean"),
    (serializers.IntegerField, (int,), "an integer"),
    (serializers.FloatField, (int, float), "a number"),
    (serializers.ListField, (list,), "an array"),
    (serializers.ChoiceField, (str,), "a string"),
    (serializers.DateTimeField, (str,), "a date-time string"),
    (serializers.CharField, (str,), "a string"),
)


def json_type_error(field: serializers.Field, value: Any) -> str:
    """Why ``value`` is not of the JSON type ``field`` takes ("" when it is)."""
    if value is None:
        return ""  # the field's own allow_null decides
    if isinstance(field, VectorField):
        # It checks its own items (validate_vector), once; a second pass would cost a search
        # request a few hundred isinstance calls.
        return "" if isinstance(value, list) else "must be an array"
    for field_class, types, name in _JSON_TYPES:
        if isinstance(field, field_class):
            if (
                isinstance(field, serializers.IntegerField)
                and isinstance(value, float)
                and value.is_integer()
            ):
                return ""  # 3.0 is an integer to JSON Schema
            if isinstance(value, bool) and bool not in types or not isinstance(value, types):
                return f"must be {name}"
            if (
                isinstance(field, serializers.ListField)
                and isinstance(value, list)
                and not isinstance(field.child, serializers.Serializer)
            ):
                for item in value:
                    wrong = json_type_error(field.child, item)
                    if wrong:
                        return f"every item {wrong}"
            return ""
    return ""


def _fresh(field: serializers.Field) -> serializers.Field:
    """A copy of an unbound field to bind to one serializer: its own attributes, sharing what no
    request changes (validators, choices, messages). A nested serializer is copied whole."""
    if isinstance(field, serializers.BaseSerializer):
        return copy.deepcopy(field)
    clone = copy.copy(field)
    child = getattr(field, "child", None)
    if isinstance(child, serializers.Field):
        # Bound to its list when the list was made (name "", source ""): only the parent changes.
        fresh = _fresh(child)
        fresh.parent = clone  # type: ignore[assignment]  # a list field, not a serializer, is its parent
        setattr(clone, "child", fresh)  # noqa: B010 - a list's or a dict's child, not every field's
    return clone


class StrictSerializer(serializers.Serializer):
    # Refuses fields it does not know (a typo is a 400, not an ignored option) and values of
    # another JSON type. The API schema says so (``memory_platform.api.schema``), and states the
    # rules in ``schema_rules`` too. A serializer of query parameters (all strings) sets
    # ``from_query``.
    from_query = False
    schema_rules: dict[str, Any] = {}
    #: The declared fields, built once for each class (``_templates``).
    _field_templates: ClassVar[dict[str, serializers.Field] | None] = None

    def get_fields(self) -> dict[str, serializers.Field]:
        """The declared fields, copied for this instance. DRF deep-copies them for every instance,
        which builds each field again (about a millisecond a request for a search's 19); here they
        are built once per class (``_templates``, never bound) and each instance binds its own
        shallow copies (``_fresh``). A model serializer makes its fields from the model: DRF's way."""
        if isinstance(self, serializers.ModelSerializer):
            return super().get_fields()
        return {name: _fresh(field) for name, field in self._templates().items()}

    @classmethod
    def _templates(cls) -> dict[str, serializers.Field]:
        templates = cls.__dict__.get("_field_templates")
        if templates is None:
            templates = copy.deepcopy(cls._declared_fields)
            cls._field_templates = templates
        return templates

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
            fixed = sorted(name for name in data if self.fields[name].read_only)
            if fixed:  # a value the server sets is not silently dropped either
                raise serializers.ValidationError({name: ["read-only"] for name in fixed})
            if not self.from_query:
                wrong = {
                    name: [error]
                    for name, value in data.items()
                    if (error := json_type_error(self.fields[name], value))
                }
                if wrong:
                    raise serializers.ValidationError(wrong)
        return super().to_internal_value(data)


@extend_schema_field({"type": "object", "description": "any JSON object, at most MAX_METADATA_BYTES"})
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


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "number"},
        "minItems": int(memory_settings.EMBEDDING_DIM),
        "maxItems": int(memory_settings.EMBEDDING_DIM),
        "contains": {"not": {"const": 0}},
        "description": "an embedding of the tenant's dimension, not all zeros (384; an openai tenant whose "
        "model answers fewer dimensions sends that many)",
    }
)
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
            return to_storage(validate_vector(data, dim))
        except EmbeddingError as exc:
            raise serializers.ValidationError(str(exc)) from None


class _UntrimmedLengthCharField(serializers.CharField):
    """A CharField whose ``max_length`` holds for the text as sent, as the schema's ``maxLength``
    says (DRF checks it after trimming the whitespace around it)."""

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if isinstance(data, str) and self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().run_validation(data)


def scope_field() -> serializers.CharField:
    return _UntrimmedLengthCharField(
        required=False,
        allow_blank=True,
        max_length=int(memory_settings.MAX_SCOPE_CHARS),
        trim_whitespace=True,
    )


@extend_schema_field({"type": "boolean"})
class QueryBooleanField(serializers.Field):
    """A boolean query parameter: ``true`` or ``false``, nothing else (DRF's BooleanField reads a
    missing one as false, like an unticked checkbox, and an empty one as null)."""

    def to_internal_value(self, data: Any) -> bool:
        if data not in ("true", "false"):
            raise serializers.ValidationError("must be true or false")
        return bool(data == "true")

    def to_representation(self, value: Any) -> Any:
        return value
