"""A text the server refuses as blank is one the schema calls invalid, and the other way round:
Python's whitespace (what ``str.strip`` removes) is not ECMA's ``\\s``."""

import re

import jsonschema_rs
import pytest

from memory_platform.api.serializers import NOT_BLANK

pytestmark = pytest.mark.django_db(transaction=True)

# U+001F and U+0085 are whitespace to Python only; U+FEFF to ECMA only.
CASES = {"\x1f": False, "\x85 \x1c": False, " \t\u3000": False, "\ufeff": True, "a": True}


@pytest.mark.parametrize("text", list(CASES))
def test_the_schema_pattern_and_the_server_agree_on_blank_text(caller, text):
    assert bool(re.search(NOT_BLANK, text)) is CASES[text]
    response = caller.post("/api/v1/turns", {"session_id": "s1", "turns": [{"role": "user", "text": text}]})
    assert response.status_code == (201 if CASES[text] else 400), response.json()
    search = caller.post("/api/v1/search", {"query": text})
    assert search.status_code == (200 if CASES[text] else 400), search.json()


def test_the_schema_states_the_pattern_the_server_applies(caller):
    response = caller.get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    turn = schema["components"]["schemas"]["TurnIn"]["properties"]["text"]
    search = schema["components"]["schemas"]["SearchIn"]["anyOf"][0]["properties"]["query"]
    for pattern in (turn["pattern"], search["pattern"]):
        # As a schema's reader applies it (ECMA regex, as schemathesis does); `\S` fails here.
        assert {text: jsonschema_rs.is_valid({"pattern": pattern}, text) for text in CASES} == CASES
