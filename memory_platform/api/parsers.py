"""The API's JSON parser: refuses what would reach a store and fail there, before any view runs.

Python's JSON decoder raises RecursionError on very deep nesting, and Postgres refuses the NUL
character in text and JSON values: both used to surface as 500s after validation had passed
(hardening finding 6). Both are a 400 here, and nothing is written.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from memory_platform.conf import memory_settings


def check_value(value: Any, max_depth: int) -> None:
    """Raise ParseError when ``value`` nests deeper than ``max_depth`` or holds a NUL character
    in any key or string. Iterative, so a deep value cannot exhaust the stack here either."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise ParseError("text must not contain the NUL character (\\u0000)")
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise ParseError(f"JSON nests deeper than {max_depth} levels")
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)


class StrictJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON nests too deeply") from None
        check_value(data, int(memory_settings.MAX_JSON_DEPTH))
        return data
