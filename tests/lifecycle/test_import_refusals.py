"""A malformed import is a 400 naming the line and the field, and nothing is written: the bodies
that used to reach a store (or crash before it) in each of the three formats."""

from __future__ import annotations

import json

import pytest

from episodes.models import Episode, Turn
from tests.conftest import Caller

from .import_bodies import HASHING, MEM0, TURNS, an_export, holdings, jsonl
from .rights import ADMIN, import_

pytestmark = pytest.mark.django_db(transaction=True)


def with_episode(edit):
    """The export with its first episode (line 3) edited."""

    def body(records: list[dict]) -> bytes:
        return jsonl([records[0], records[1], edit(dict(records[2])), *records[3:]])

    return body


def with_counters(fields: str):
    """The export with its counters record's fields replaced by the JSON text ``fields``."""

    def body(records: list[dict]) -> bytes:
        out = [
            f'{{"type": "counters", "fields": {fields}}}' if r.get("type") == "counters" else json.dumps(r)
            for r in records
        ]
        return "\n".join(out).encode()

    return body


def line_of(kind: str):
    """The line of the export's first record of ``kind``."""
    return lambda records: 1 + next(i for i, r in enumerate(records) if r.get("type") == kind)


counters_line = line_of("counters")


def with_first(kind: str, edit):
    """The export with its first record of ``kind`` edited."""

    def body(records: list[dict]) -> bytes:
        at = line_of(kind)(records) - 1
        return jsonl([*records[:at], edit(dict(records[at])), *records[at + 1 :]])

    return body


def second_line(sample: list[dict], **edit) -> bytes:
    """Two lines of ``sample``'s format, the second one edited."""
    return jsonl([sample[0], {**sample[2], **edit}])


CASES = [
    # (name, the body made of an export's records, the line named, what else the message names)
    (
        "invalid UTF-8 on line 2",
        lambda r: jsonl(r[:1]) + b'\n{"type": "policy", "policy": {"note": "caf\xe9"}}\n' + jsonl(r[2:]),
        lambda r: 2,
        "UTF-8",
    ),
    ("a UTF-16 body", lambda r: jsonl(r).decode().encode("utf-16"), lambda r: 1, "UTF-16"),
    (
        "a line nested 100,000 levels deep",
        lambda r: b'{"role": "user", "text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        lambda r: 1,
        "nests",
    ),
    ("mem0 metadata a list", lambda r: second_line(MEM0, metadata=["a"]), lambda r: 2, "metadata"),
    ("mem0 metadata a string", lambda r: second_line(MEM0, metadata="a"), lambda r: 2, "metadata"),
    ("mem0 metadata a number", lambda r: second_line(MEM0, metadata=7), lambda r: 2, "metadata"),
    ("turn metadata a list", lambda r: second_line(TURNS, metadata=["a"]), lambda r: 2, "metadata"),
    ("turn metadata a string", lambda r: second_line(TURNS, metadata="a"), lambda r: 2, "metadata"),
    ("turn metadata a number", lambda r: second_line(TURNS, metadata=7), lambda r: 2, "metadata"),
    (
        "access_window a string",
        with_episode(lambda e: {**e, "access_window": "2024-01-01"}),
        lambda r: 3,
        "access_window",
    ),
    (
        "access_window a list",
        with_episode(lambda e: {**e, "access_window": ["started_at"]}),
        lambda r: 3,
        "access_window",
    ),
    (
        "access_window a number",
        with_episode(lambda e: {**e, "access_window": 5}),
        lambda r: 3,
        "access_window",
    ),
    ("tags a string", with_episode(lambda e: {**e, "tags": "travel"}), lambda r: 3, "tags"),
    ("counters 1e400", with_counters('{"searches": 1e400}'), counters_line, "searches"),
    ("counters NaN", with_counters('{"searches": NaN}'), counters_line, "searches"),
    ("counters 2**70", with_counters(f'{{"searches": {2**70}}}'), counters_line, "searches"),
    # and others of the kind
    ("an empty body", lambda r: b" \n\n", lambda r: 1, "empty"),
    (
        "a lone surrogate in metadata",
        lambda r: with_episode(lambda e: {**e, "metadata": {"k": "@"}})(r).replace(b'"@"', b'"\\ud800"'),
        lambda r: 3,
        "metadata.k",
    ),
    (
        "a time without its UTC offset",
        with_episode(lambda e: {**e, "first_occurred_at": "2024-01-01T10:00:00"}),
        lambda r: 3,
        "first_occurred_at",
    ),
    ("a link to itself", with_first("link", lambda k: {**k, "dst": k["src"]}), line_of("link"), "dst"),
    (
        "a journal entry without its time",
        with_first("journal", lambda j: {k: v for k, v in j.items() if k != "created_at"}),
        line_of("journal"),
        "created_at",
    ),
    ("a counter that is no number", with_counters('{"searches": "many"}'), counters_line, "searches"),
    (
        "a policy value of another type",
        with_first("policy", lambda p: {**p, "policy": {**p["policy"], "hot_days": "soon"}}),
        lambda r: 2,
        "hot_days",
    ),
]


@pytest.fixture
def importer(db) -> Caller:
    return Caller("refusals-target", scopes=ADMIN, embedder=HASHING)


@pytest.mark.parametrize(("body", "line", "names"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_malformed_body_is_a_400_naming_the_line_and_writes_nothing(importer, body, line, names):
    records = an_export()
    # An empty tenant: the one an import writes the most into (its policy and counters too).
    before = holdings(importer)
    response = import_(importer, body(records))
    assert response.status_code == 400, response.content[:500]
    message = " ".join(response.json()["error"]["details"]["body"])
    assert message.startswith(f"line {line(records)}: "), message
    assert names in message, message
    assert holdings(importer) == before
    assert Episode.objects.across_tenants("test").filter(tenant=importer.tenant).count() == 0
    assert Turn.objects.across_tenants("test").filter(tenant=importer.tenant).count() == 0


def test_the_unedited_bodies_import(importer):
    """The bodies above differ from these by the one malformed field."""
    records = an_export()
    assert import_(importer, jsonl(records)).status_code == 200
    assert import_(importer, second_line(MEM0)).status_code == 200
    assert import_(importer, second_line(TURNS)).status_code == 200
