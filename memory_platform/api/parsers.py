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
    (``turns[0].metadata.k: ...``). Iterative, so a deep value cannot exhaust the stack here either.

    Each item carries where it sits as a link to its parent's place and its own key, spelled out
    only for the message: a vector of 384 numbers would otherwise make 384 path strings a request."""
    stack: list[tuple[Any, int, _Place]] = [(value, 1, None)]
    while stack:
        item, depth, place = stack.pop()
        if isinstance(item, str):
            _check_text(item, place)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ParseError(
                    f"{_at(place)}numbers must be finite (NaN, Infinity and numbers beyond 1e308 are not JSON)"
                )
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise ParseError(f"{_at(place)}JSON nests deeper than {max_depth} levels")
            if isinstance(item, dict):
                for key, child in item.items():
                    if "\x00" in key or _SURROGATE.search(key):
                        _check_text(key, place, of_key=True)
                    stack.append((child, depth + 1, (place, key)))
            elif item and all(child.__class__ is float for child in item):
                # Decimals only (a vector): nothing in it nests or holds text.
                if not all(map(math.isfinite, item)):
                    at = next(i for i, child in enumerate(item) if not math.isfinite(child))
                    stack.append((item[at], depth + 1, (place, at)))
            else:
                stack.extend((child, depth + 1, (place, i)) for i, child in enumerate(item))


#: Where a value sits: None for the body, else its parent's place and its key or index.
_Place = tuple[Any, str | int] | None


def _path(place: _Place) -> str:
    keys: list[str | int] = []
    while place is not None:
        place, key = place
        keys.append(key)
    path = ""
    for key in reversed(keys):
        path = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
    return path


def _at(place: _Place, *, of_key: bool = False) -> str:
    """The message's start: where the value is, or (``of_key``) the object a key is in."""
    path = _path(place)
    if of_key:
        return f"a key in {path or 'the body'}: "
    return f"{path}: " if path else ""


def _check_text(text: str, place: _Place, *, of_key: bool = False) -> None:
    if "\x00" in text:
        raise ParseError(f"{_at(place, of_key=of_key)}text must not contain the NUL character (\\u0000)")
    if _SURROGATE.search(text):
        raise ParseError(
            f"{_at(place, of_key=of_key)}text must not contain half of a UTF-16 surrogate pair (\\ud800-\\udfff)"
        )


class StrictJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON nests too deeply") from None
        check_value(data, int(memory_settings.MAX_JSON_DEPTH))
        return data
