"""The OpenAPI schema states the real rules (hardening finding 11): what drf-spectacular reads from
the views and serializers, plus
- the auth scheme (a Bearer API key);
- request bodies that refuse unknown fields (``additionalProperties: false`` for every
  ``StrictSerializer``) and the rules a serializer states in ``schema_rules`` (e.g. "at least one
  of these fields");
- every status code an operation can answer, with the error envelope (``errors.Error``) as its
  body (``error_responses``);
- that no key or string of a request holds the NUL character (``without_nul``).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema


class ApiKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "memory_platform.tenancy.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key (`<prefix>.<secret>`): it decides the tenant and the scopes.",
        }


class PlatformAutoSchema(AutoSchema):
    def get_operation(self, *args: Any, **kwargs: Any) -> Any:
        from .answers import answer_serializer
        from .errors import Error

        operation = super().get_operation(*args, **kwargs)
        if operation is not None:
            # Any operation can fail: the envelope's component, made from its TypedDict, for
            # ``error_responses`` to refer to.
            self.resolve_serializer(answer_serializer(Error)(), "response")
        return operation

    def _get_request_body(self, direction: str = "request") -> Any:
        # drf-spectacular documents bodies of PUT, PATCH and POST only; a view whose DELETE takes
        # one (DELETE /links) says so with ``delete_takes_body``.
        method = self.method
        if method == "DELETE" and getattr(self.view, "delete_takes_body", False):
            self.method = "POST"
        try:
            body = super()._get_request_body(direction)
        finally:
            self.method = method
        # A body whose rules ask for one of several fields cannot be left out.
        if body is not None and getattr(self.get_request_serializer(), "schema_rules", None):
            body["required"] = True
        return body

    def _insert_field_validators(self, field: Any, schema: dict[str, Any]) -> None:
        from rest_framework import serializers

        from .serializers import NOT_BLANK

        super()._insert_field_validators(field, schema)
        # What DRF refuses, said in the schema: a blank string, an empty list. (The NUL character,
        # refused in every string, is added to every pattern at the end: ``without_nul``.)
        if isinstance(field, serializers.CharField) and not field.allow_blank:
            schema.setdefault("minLength", 1)
            if field.trim_whitespace:
                schema.setdefault("pattern", NOT_BLANK)  # only whitespace is blank once trimmed
        if isinstance(field, serializers.ListField | serializers.ListSerializer) and not field.allow_empty:
            schema.setdefault("minItems", 1)

    def _map_serializer(self, serializer: Any, direction: Any, bypass_extensions: bool = False) -> Any:
        from .answers import AnswerSerializer
        from .serializers import StrictSerializer

        result = super()._map_serializer(serializer, direction, bypass_extensions)
        if isinstance(serializer, StrictSerializer) and not getattr(serializer, "from_query", False):
            result["additionalProperties"] = False
            result.update(getattr(serializer, "schema_rules", {}))
        if isinstance(serializer, AnswerSerializer):
            result["additionalProperties"] = False  # an answer holds what its TypedDict declares
        return result


#: Every operation can answer these: the request is checked, then the key, its scope and its rate.
COMMON = {
    "400": "the request is malformed or breaks a rule (`details` names the fields)",
    "401": "no API key, or an unknown or revoked one",
    "403": "the key lacks the scope this operation needs",
    "429": "over the key's or the tenant's rate limit; or, in place of a 401, too many invalid API "
    "keys from this address; retry after `Retry-After` seconds",
}
WITH_BODY = {"413": "the body is larger than `MEMORY_MAX_REQUEST_BYTES` (or a batch holds too many turns)"}
#: Only where the body must be JSON (``POST /import`` reads any body as JSON lines).
WITH_JSON_BODY = {"415": "the body is not `application/json`"}
ON_ONE_MEMORY = {
    "404": "no such memory in the caller's tenant",
    "409": "the memory changed meanwhile, or cannot take this change",
}


def error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular post-processing hook: the error envelope (``PlatformAutoSchema.get_operation``
    declares its component) on every status code that can occur."""
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, item in result.get("paths", {}).items():
        for _method, operation in item.items():
            codes = dict(COMMON)
            if "requestBody" in operation:
                codes.update(WITH_BODY)
                if set(operation["requestBody"].get("content", {})) == {"application/json"}:
                    codes.update(WITH_JSON_BODY)
            if re.search(r"\{\w+\}", path):
                codes.update(ON_ONE_MEMORY)
            responses = operation.setdefault("responses", {})
            codes.update(
                {code: description for code, description in ON_ONE_MEMORY.items() if code in responses}
            )
            for code, description in codes.items():
                responses.setdefault(code, {"description": description})
                responses[code].setdefault("content", ref)
            responses["429"].setdefault(
                "headers", {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait"}}
            )
    return result


#: What holds no NUL character, which every request refuses (``parsers.check_value`` for bodies,
#: DRF's fields for query parameters) because Postgres cannot store it. Said with ``not``, beside a
#: string's own pattern: a pattern such as ``^[^\x00]*$`` would have generators draw a long text
#: one character at a time.
NO_NUL = {"not": {"pattern": "\\x00"}}
#: Any JSON value of a free-form object (``metadata``), NUL-free in its keys and strings.
JSON_VALUE = {
    "description": "any JSON value; no key or string holds the NUL character",
    "anyOf": [
        {"type": "string", **NO_NUL},
        {"type": ["number", "boolean", "null"]},
        {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
        {
            "type": "object",
            "propertyNames": NO_NUL,
            "additionalProperties": {"$ref": "#/components/schemas/JsonValue"},
        },
    ],
}


def without_nul(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular post-processing hook: every string a request may hold (body fields, query
    and path parameters, keys and values of free-form objects) says it holds no NUL character, so
    that a generator of valid requests never sends one and one of invalid requests expects it
    refused."""

    def fix(schema: Any) -> None:
        if not isinstance(schema, dict) or "$ref" in schema:
            return
        kinds = schema.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if "string" in kinds and "enum" not in schema and "format" not in schema:
            # A string that may be null (in an answer): a pattern holds for null, so its `not` would refuse it.
            schema.update(
                {"not": {"type": "string", **NO_NUL["not"]}} if "null" in kinds else copy.deepcopy(NO_NUL)
            )
        if (
            "object" in kinds
            and "properties" not in schema
            and schema.get("additionalProperties") in (None, True)
        ):
            schema["propertyNames"] = copy.deepcopy(NO_NUL)
            schema["additionalProperties"] = {"$ref": "#/components/schemas/JsonValue"}
        for key in ("properties", "patternProperties"):
            for child in schema.get(key, {}).values():
                fix(child)
        for key in ("items", "additionalProperties", "not"):
            fix(schema.get(key))
        for key in ("anyOf", "oneOf", "allOf"):
            for child in schema.get(key, []):
                fix(child)

    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in schemas.items():
        if name != "Error":
            fix(schema)
    schemas["JsonValue"] = JSON_VALUE
    for item in result.get("paths", {}).values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                fix(parameter.get("schema"))
            for media in operation.get("requestBody", {}).get("content", {}).values():
                fix(media.get("schema"))
    return result
