"""The API's JSON parser: refuses what would reach a store and fail there, before any view runs.

Python's JSON decoder raises RecursionError on very deep nesting and takes ``NaN``, ``Infinity``
and numbers too large for a float (read as infinity), none of which is JSON; Postgres refuses the
NUL character and half of a UTF-16 surrogate pair (``"\\ud800"``, which no UTF-8 text can hold)
in text and JSON values. Each used to surface as a 500 after validation had passed; each is a 400
here, and nothing is written.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from memory_platform.conf import memory_settings

_SURROGATE = re.compile("[\ud800-\udfff]")


def check_value(value: Any, max_depth: int) -> None:
    """Raise ParseError when ``value`` nests deeper than ``max_depth``, holds a NUL character or a
    lone surrogate in any key or string, or a number that is not finite; the message says where
    (``turns[0].metadata.k: ...``). Iterative, so a deep value cannot exhaust the stack here either."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            _check_text(item, path)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ParseError(
                    f"{_at(path)}numbers must be finite (NaN, Infinity and numbers beyond 1e308 are not JSON)"
                )
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise ParseError(f"{_at(path)}JSON nests deeper than {max_depth} levels")
            if isinstance(item, dict):
                for key, child in item.items():
                    _check_text(str(key), f"a key in {path or 'the body'}")
                    stack.append((child, depth + 1, f"{path}.{key}" if path else str(key)))
            else:
                stack.extend((child, depth + 1, f"{path}[{i}]") for i, child in enumerate(item))


def _at(path: str) -> str:
    return f"{path}: " if path else ""


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise ParseError(f"{_at(path)}text must not contain the NUL character (\\u0000)")
    if _SURROGATE.search(text):
        raise ParseError(
            f"{_at(path)}text must not contain half of a UTF-16 surrogate pair (\\ud800-\\udfff)"
        )


class StrictJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON nests too deeply") from None
        check_value(data, int(memory_settings.MAX_JSON_DEPTH))
        return data
