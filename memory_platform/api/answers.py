"""An answer's shape is declared once, as a ``TypedDict`` beside the code that builds it; this module
makes the output serializer drf-spectacular reads from that declaration (``answer_serializer``),
so the OpenAPI schema says what the code returns and mypy checks that the code returns it
(docs/decisions/0048-typed-answers.md).

The serializers document; they do not convert. A view answers with the ``TypedDict`` it was given
(``Response(body)``): passing every search hit through DRF's fields would cost time and could change
the JSON (a number's type, a missing optional key). What keeps the two honest is the type checker
on one side and, on the other, tests/api/test_schema_truth.py, which checks real answers against the
schema (every answer component refuses keys it does not declare).

How a ``TypedDict`` reads as fields:

- ``str``, ``int``, ``float``, ``bool``, ``datetime`` and ``UUID`` (as DRF writes them); ``X | None`` may be null; ``Any`` is any JSON value;
- ``Literal`` values; a union of plain types (``float | Literal["+Inf"] | None``): any of them;
- ``list[X]``, ``dict[str, X]`` (keys the data decides, such as layers or states);
- another ``TypedDict``: a nested component of that name; ``A | B`` of ``TypedDict`` s: one of them;
- ``NotRequired[X]``: a key that is left out when it does not apply (said in its ``Doc``);
- ``Annotated[X, Doc("...")]`` describes a field, ``Annotated[str, SomeTextChoices]`` lists its values.
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from datetime import datetime
from typing import (
    Any,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)
from uuid import UUID

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field, extend_schema_serializer
from rest_framework import serializers
from typing_extensions import Doc

__all__ = ["AnswerSerializer", "Doc", "answer_serializer", "one_of"]


# An answer's serializer: the schema lists every key it may hold, and no other
# (``memory_platform.api.schema``). No docstring: the schema would show it for every answer.
class AnswerSerializer(serializers.Serializer):  # type: ignore[type-arg]
    answer = True


@functools.cache
def answer_serializer(shape: type) -> type[AnswerSerializer]:
    """The output serializer of the ``TypedDict`` ``shape``, named as it is (its component's name);
    one class per shape, so a shape nested in several answers is one component."""
    if not is_typeddict(shape):
        raise TypeError(f"{shape!r} is not a TypedDict")
    hints = get_type_hints(shape, include_extras=True)
    total = getattr(shape, "__total__", True)
    fields = {name: _field(hint, required=total) for name, hint in hints.items()}
    doc = (shape.__doc__ or "").replace("``", "`")  # the schema reads Markdown
    attrs: dict[str, Any] = {**fields, "__module__": shape.__module__, "__doc__": doc}
    serializer = type(f"{shape.__name__}Serializer", (AnswerSerializer,), attrs)
    return extend_schema_serializer(component_name=shape.__name__)(serializer)  # type: ignore[no-any-return]


def one_of(name: str, *shapes: type) -> PolymorphicProxySerializer:
    """An answer that is one of ``shapes`` (told apart by the keys each requires)."""
    return PolymorphicProxySerializer(
        component_name=name,
        serializers=[answer_serializer(s) for s in shapes],
        resource_type_field_name=None,
        many=False,
    )


def _field(hint: Any, *, required: bool, **kwargs: Any) -> serializers.Field:  # type: ignore[type-arg]
    origin = get_origin(hint)
    if origin is Required or origin is NotRequired:
        return _field(get_args(hint)[0], required=origin is Required, **kwargs)
    if origin is typing.Annotated:
        inner, *extras = get_args(hint)
        for extra in extras:
            if isinstance(extra, Doc):
                kwargs["help_text"] = extra.documentation
            elif isinstance(extra, type) and issubclass(extra, enum.Enum):
                kwargs["choices"] = [member.value for member in extra]
        return _field(inner, required=required, **kwargs)
    if origin is Union or origin is types.UnionType:
        options = [arg for arg in get_args(hint) if arg is not type(None)]
        if len(options) < len(get_args(hint)):
            kwargs["allow_null"] = True
        if len(options) == 1:
            return _field(options[0], required=required, **kwargs)
        if all(is_typeddict(option) for option in options):
            name = "Or".join(option.__name__ for option in options)
            return _polymorphic(name, options, required=required, **kwargs)
        return _any_of([*options, *([None] if kwargs.pop("allow_null", False) else [])], required, kwargs)
    if origin is Literal:
        kwargs["choices"] = list(get_args(hint))
    kwargs["required"] = required
    if is_typeddict(hint):
        return answer_serializer(hint)(**kwargs)
    if origin is list:
        (item,) = get_args(hint)
        if get_origin(item) in (Union, types.UnionType) and all(map(is_typeddict, get_args(item))):
            name = "Or".join(option.__name__ for option in get_args(item))
            return _polymorphic(name, list(get_args(item)), many=True, **kwargs)
        if is_typeddict(item):
            return answer_serializer(item)(many=True, **kwargs)
        return serializers.ListField(child=_field(item, required=True), **kwargs)
    if origin is dict:
        key, value = get_args(hint)
        if key is not str:
            raise TypeError("a JSON object's keys are strings")
        return serializers.DictField(child=_field(value, required=True), **kwargs)
    if "choices" in kwargs:
        return serializers.ChoiceField(**kwargs)
    if hint is str:
        return serializers.CharField(allow_blank=True, trim_whitespace=False, **kwargs)
    if hint is bool:
        return serializers.BooleanField(**kwargs)
    if hint is int:
        return serializers.IntegerField(**kwargs)
    if hint is float:
        return serializers.FloatField(**kwargs)
    if hint is datetime:
        return serializers.DateTimeField(**kwargs)
    if hint is UUID:
        return serializers.UUIDField(**kwargs)
    if hint is Any:
        return serializers.JSONField(**kwargs)
    raise TypeError(f"no field for {hint!r}")


#: The JSON Schema of each value a union of plain values may take.
_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    None: {"type": "null"},
}


def _any_of(options: list[Any], required: bool, kwargs: dict[str, Any]) -> serializers.Field:  # type: ignore[type-arg]
    """A value of one of several plain types (``float | Literal["+Inf"] | None``)."""
    schemas = [
        {"enum": list(get_args(option))} if get_origin(option) is Literal else _SCALARS[option]
        for option in options
    ]
    field = extend_schema_field({"anyOf": schemas})(type("AnyOfField", (serializers.JSONField,), {}))
    return field(required=required, **kwargs)  # type: ignore[no-any-return]


def _polymorphic(name: str, shapes: list[type], **kwargs: Any) -> PolymorphicProxySerializer:
    return PolymorphicProxySerializer(
        component_name=name,
        serializers=[answer_serializer(s) for s in shapes],
        resource_type_field_name=None,
        **kwargs,
    )
