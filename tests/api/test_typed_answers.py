"""Every answer has a declared shape in the OpenAPI schema (docs/decisions/0048-typed-answers.md):
a response body is a component made from a TypedDict (``memory_platform.api.answers``), one of
several, or a declared string (the export's JSON lines) — never an object with no properties, and
never left out. Whether real answers keep to these shapes is tests/api/test_schema_truth.py's."""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator

from memory_platform.api.answers import answer_serializer
from memory_platform.api.errors import Error


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def untyped(schema: dict[str, Any], node: dict[str, Any] | None) -> list[str]:
    """Why ``node`` (a response body's schema) is not a declared shape ([] when it is)."""
    if node is None:
        return ["no schema"]
    node = _resolve(schema, node)
    if "oneOf" in node or "anyOf" in node:
        return [why for option in node.get("oneOf", node.get("anyOf")) for why in untyped(schema, option)]
    if node.get("type") == "string":
        return []
    if node.get("type") == "object" and node.get("properties"):
        return []
    return [f"an object with no declared properties: {node}"]


def test_every_response_body_has_a_declared_schema(schema):
    found = []
    operations = 0
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            operations += 1
            for code, response in operation["responses"].items():
                content = response.get("content")
                if not content:
                    found.append(f"{method.upper()} {path} {code}: no body declared")
                    continue
                for media, body in content.items():
                    found += [
                        f"{method.upper()} {path} {code} {media}: {why}"
                        for why in untyped(schema, body.get("schema"))
                    ]
    assert operations >= 20  # the walk saw the API
    assert found == []


def test_what_the_walk_calls_untyped(schema):
    # what `responses={200: dict}` made, and a response with no schema
    assert untyped(schema, {"type": "object", "additionalProperties": {}})
    assert untyped(schema, None)
    assert untyped(schema, {"oneOf": [{"$ref": "#/components/schemas/Hit"}, {"type": "object"}]})
    assert not untyped(schema, {"$ref": "#/components/schemas/SearchAnswer"})


def test_an_answer_component_holds_only_what_its_typeddict_declares(schema):
    components = schema["components"]["schemas"]
    for name in ("SearchAnswer", "CompactHit", "Hit", "HotMemory", "WarmMemory", "ColdMemory", "Error"):
        assert components[name]["additionalProperties"] is False, name
    # the compact and the full view of a hit, and a memory in each layer: told apart by their keys
    assert {"text", "date"} <= set(components["CompactHit"]["required"])
    assert "text" not in components["Hit"]["properties"]
    assert {"summary", "key_points", "partial"} <= set(components["WarmMemory"]["required"])
    assert {"headline", "index_only", "tags"} <= set(components["ColdMemory"]["required"])
    assert (
        "turns" in components["HotMemory"]["required"] and "turns" not in components["WarmMemory"]["required"]
    )


def test_an_error_is_the_envelope_its_typeddict_declares(schema):
    error = schema["components"]["schemas"]["Error"]
    assert set(error["properties"]) == set(Error.__annotations__) == {"error"}
    detail = _resolve(schema, error["properties"]["error"])
    assert set(detail["required"]) == {"code", "message", "details"}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            body = operation["responses"]["401"]["content"]["application/json"]["schema"]
            assert body == {"$ref": "#/components/schemas/Error"}, (method, path)


def test_the_same_typeddict_is_one_component():
    assert answer_serializer(Error) is answer_serializer(Error)


def test_a_shape_the_builder_cannot_read_is_refused():
    from typing import TypedDict

    class Odd(TypedDict):
        when: set[str]

    with pytest.raises(TypeError):
        answer_serializer(Odd)
