"""Every API answer the suite sees is checked for the tables' integer keys of episodes and turns:
the API names them by public id only (docs/decisions/0014-public-ids.md).

``InternalIdWatch`` (a middleware of the test settings, outermost) reads each JSON answer under
``/api/v1/``, whichever client made the request (the test client, a live server's thread, the MCP
tools' in-process calls, schemathesis); ``tests/conftest.py`` fails the test that saw one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse

#: A key that names rows: ``id``, ``episode_id``, ``turn_ids``, ``best_turn_id`` ...
_ID_KEY = re.compile(r"(?:^|_)ids?$")
#: Strings the caller chose (scope), the caller's own data (metadata) and prose that may quote the
#: caller's request (an error's message): not the platform's ids.
_CALLERS = frozenset({"user_id", "agent_id", "session_id", "metadata", "message"})
#: An API path naming a memory by an integer (``unpack``, ``expand``); not a caller's text that
#: happens to hold such a segment (a LangGraph key such as "alice/memories/2023/k").
_PATH = re.compile(r"^/api/v1/memories/\d+(?:/|$)")

#: What the watch found since the running test began: "<method> <path>: <where>=<value>".
seen: list[str] = []


def internal_ids(body: Any, where: str = "$") -> Iterator[str]:
    """Where ``body`` shows an integer as a row's id: an int (or a string of digits) under an id
    key, or a memory's path with an integer in it."""
    if isinstance(body, dict):
        for key, value in body.items():
            if key in _CALLERS:
                continue
            here = f"{where}.{key}"
            if _ID_KEY.search(str(key)):
                for one in value if isinstance(value, list) else [value]:
                    if (isinstance(one, int) and not isinstance(one, bool)) or (
                        isinstance(one, str) and one.isdigit()
                    ):
                        yield f"{here}={one!r}"
            yield from internal_ids(value, here)
    elif isinstance(body, list):
        for i, value in enumerate(body):
            yield from internal_ids(value, f"{where}[{i}]")
    elif isinstance(body, str) and _PATH.search(body):
        yield f"{where}={body!r}"


class InternalIdWatch:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            request.path.startswith("/api/v1/")
            and not response.streaming
            and response.get("Content-Type", "").startswith("application/json")
        ):
            try:
                body = json.loads(response.content)
            except ValueError:
                return response
            seen.extend(f"{request.method} {request.path}: {leak}" for leak in internal_ids(body))
        return response
