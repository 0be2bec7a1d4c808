"""The Python client's answer types match the OpenAPI schema the server generates: each
``<Component>Json`` TypedDict of ``memory_platform_client.types`` has the keys of the schema's
``<Component>`` and the same ones always there (docs/decisions/0048-typed-answers.md); a key that
names another component (or a list of them) names the same one on both sides."""

from __future__ import annotations

import types
import typing
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

import pytest
from drf_spectacular.generators import SchemaGenerator
from memory_platform_client import types as client_types

JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


@pytest.fixture(scope="module")
def components() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


def answer_types() -> dict[str, type]:
    found = {
        name: value
        for name, value in vars(client_types).items()
        if is_typeddict(value) and not name.startswith("_")
    }
    assert all(name.endswith("Json") for name in found), sorted(found)
    return found


def _ref(node: dict[str, Any]) -> str | None:
    for option in [node, *node.get("allOf", []), *node.get("oneOf", [])]:
        if "$ref" in option:
            return option["$ref"].rsplit("/", 1)[1]
    return None


def mismatches(hint: Any, node: dict[str, Any]) -> list[str]:
    """How a client type differs from a property's schema, where the schema names a component
    or a plain JSON type ([] when they agree)."""
    options = (
        [a for a in get_args(hint) if a is not type(None)]
        if get_origin(hint) in (typing.Union, types.UnionType)
        else [hint]
    )
    if len(options) == 1 and is_typeddict(options[0]):
        wanted = options[0].__name__.removesuffix("Json")
        return [] if _ref(node) == wanted else [f"{wanted} where the schema has {node}"]
    if get_origin(hint) is list and "items" in node:
        return mismatches(get_args(hint)[0], node["items"])
    kind = node.get("type")
    kinds = set(kind) - {"null"} if isinstance(kind, list) else {kind}
    if len(options) == 1 and options[0] in JSON_TYPES and kind is not None:
        wanted = JSON_TYPES[options[0]]
        return (
            []
            if wanted in kinds or (wanted == "number" and "integer" in kinds)
            else [f"{wanted} where the schema has {kind}"]
        )
    return []


def test_every_answer_type_of_the_client_is_a_component_of_the_schema(components):
    found = answer_types()
    assert len(found) >= 30
    missing = sorted(name for name in found if name.removesuffix("Json") not in components)
    assert missing == []


@pytest.mark.parametrize("name", sorted(answer_types()))
def test_a_client_type_has_its_components_keys(components, name):
    client = answer_types()[name]
    component = components[name.removesuffix("Json")]
    assert set(client.__required_keys__) | set(client.__optional_keys__) == set(component["properties"])
    assert set(client.__required_keys__) == set(component.get("required", []))
    hints = get_type_hints(client)
    wrong = {
        key: why for key, node in component["properties"].items() for why in mismatches(hints[key], node)
    }
    assert wrong == {}


def test_the_search_hits_are_either_view(components):
    hits = components["CompactHitOrHit"]["oneOf"]
    assert [_ref(h) for h in hits] == ["CompactHit", "Hit"]
    assert (
        get_type_hints(client_types.SearchAnswerJson)["results"]
        == list[client_types.CompactHitJson | client_types.HitJson]
    )


def test_a_memory_is_one_of_its_layers_shapes(components):
    assert [_ref(m) for m in components["Memory"]["oneOf"]] == ["HotMemory", "WarmMemory", "ColdMemory"]
    assert get_args(client_types.MemoryJson) == (
        client_types.HotMemoryJson,
        client_types.WarmMemoryJson,
        client_types.ColdMemoryJson,
    )
