"""Valid import bodies of every format, broken by hypothesis: fields of another type or out of range,
fields left out or added, records dropped, doubled or replaced, deep nesting, other encodings, stray
bytes and truncation. Whatever the body, ``POST /import`` never answers 5xx, and an answer of 4xx
has written nothing (rows, policy, audit, counters, Redis).

One test function: the valid bodies are made once, then the seeded hypothesis run is called inside
it (hypothesis cannot take function-scoped fixtures). A successful import moves on to a new, empty
tenant half of the time, so imports into empty tenants (policy and counters taken) and into ones
that hold memory (written over, journaled) are both broken."""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.conftest import Caller

from .import_bodies import HASHING, MEM0, TURNS, an_export, holdings
from .rights import ADMIN, import_

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = 300
FORMATS = ("platform", "mem0 lines", "mem0 document", "turns")

# A JSON literal written as it is (json.dumps cannot write 1e400 or a 5,000-digit integer): a
# placeholder string in the value, replaced in the text.
_RAW = "\ue000"
RAW_NUMBERS = [
    "1e400",
    "-1e400",
    "NaN",
    "Infinity",
    "-Infinity",
    "1e-400",
    str(2**70),
    str(-(2**63) - 1),
    "1" * 5000,
    "-0",
]
ODD_TEXT = [
    "",
    " ",
    "\x00",
    "\ud800",
    "a\u2028b\x85c",
    "x" * 40_000,
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-05:00",
    "2024-02-30T00:00:00Z",
    "2024-01-01",
    "2024-01-01T00:00:00",
    "01JB3RV6Q2S4ZJ4J3YB8R5X6WN",
    "hot",
    "cold",
]


def raw(literal: str) -> str:
    return f"{_RAW}{literal}{_RAW}"


def nested(depth: int) -> str:
    return raw("[" * depth + "]" * depth)


leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(ODD_TEXT),
    st.sampled_from(RAW_NUMBERS).map(raw),
    st.sampled_from([31, 33, 1000, 100_000]).map(nested),
)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
ENCODINGS = ["utf-16", "utf-16-le", "utf-32", "utf-8-sig", "latin-1", "cp1252"]
STRAY_BYTES = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\n", b"\r", b"\xe2\x80\xa8", b"{", b'"']


def render(fmt: str, records: list[Any], *, ascii: bool = False) -> bytes:
    """The body; ``ascii`` writes every other character as a JSON escape (a lone surrogate as
    ``\\ud800``, which JSON readers take), else as UTF-8 (a lone surrogate as bytes no UTF-8
    reader takes)."""
    if fmt == "mem0 document":
        text = json.dumps({"results": records}, ensure_ascii=ascii, indent=1)
    else:
        text = "\n".join(json.dumps(r, ensure_ascii=ascii) for r in records)
    placeholder = json.dumps(_RAW, ensure_ascii=ascii)[1:-1]
    text = re.sub(f'"{re.escape(placeholder)}(.*?){re.escape(placeholder)}"', r"\1", text)
    return text.encode("utf-8", "surrogatepass")


def mutate_records(data: st.DataObject, records: list[Any]) -> None:
    """One change to the records, in place."""
    if not records:
        records.append(data.draw(values, label="record"))
        return
    i = data.draw(st.integers(0, len(records) - 1), label="record index")
    record = records[i]
    action = data.draw(
        st.sampled_from(["set", "set", "set", "drop field", "add field", "replace", "drop", "double"]),
        label="action",
    )
    if action in {"set", "drop field"} and isinstance(record, dict) and record:
        key = data.draw(st.sampled_from(sorted(record)), label="field")
        if action == "set":
            record[key] = data.draw(values, label="value")
        else:
            del record[key]
    elif action == "add field" and isinstance(record, dict):
        record[data.draw(st.text(max_size=10), label="new field")] = data.draw(values, label="value")
    elif action == "drop":
        del records[i]
    elif action == "double":
        records.insert(i, json.loads(json.dumps(record)))
    else:
        records[i] = data.draw(values, label="record")


def mutate_bytes(data: st.DataObject, body: bytes) -> bytes:
    action = data.draw(st.sampled_from(["none", "none", "truncate", "encode", "stray byte"]), label="bytes")
    if action == "truncate":
        return body[: data.draw(st.integers(0, max(0, len(body) - 1)), label="cut at")]
    if action == "encode":
        encoding = data.draw(st.sampled_from(ENCODINGS), label="encoding")
        return body.decode("utf-8", "surrogatepass").encode(encoding, "replace")
    if action == "stray byte":
        at = data.draw(st.integers(0, len(body)), label="at")
        return body[:at] + data.draw(st.sampled_from(STRAY_BYTES), label="byte") + body[at:]
    return body


def test_a_broken_body_is_never_a_5xx_and_a_refused_one_writes_nothing(caplog):
    caplog.set_level(logging.ERROR, logger="django.request")  # a warning per 400 only slows the run
    started = time.perf_counter()
    bases = {"platform": an_export(), "mem0 lines": MEM0, "mem0 document": MEM0, "turns": TURNS}
    tenants = [Caller("fuzz-target-0", scopes=ADMIN, embedder=HASHING)]
    for fmt, records in bases.items():
        assert import_(tenants[0], render(fmt, records)).status_code == 200, fmt  # each base imports
    tenants.append(Caller("fuzz-target-1", scopes=ADMIN, embedder=HASHING))
    answered: dict[int, int] = {}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(fmt=st.sampled_from(FORMATS), data=st.data())
    def attack(fmt: str, data: st.DataObject) -> None:
        records = json.loads(json.dumps(bases[fmt]))
        for _ in range(data.draw(st.integers(0, 3), label="changes")):
            mutate_records(data, records)
        body = mutate_bytes(data, render(fmt, records, ascii=data.draw(st.booleans(), label="ascii")))
        source = data.draw(st.sampled_from([None, None, fmt.split()[0]]), label="?source")
        caller = tenants[-1]
        before = holdings(caller)
        response = import_(caller, body, **({"source": source} if source else {}))
        answered[response.status_code] = answered.get(response.status_code, 0) + 1
        assert response.status_code < 500, response.content[:300]
        if response.status_code >= 400:
            assert holdings(caller) == before
        if response.status_code == 400:  # the line (or the memory of a JSON document) is named
            assert response.json()["error"]["details"]["body"][0].startswith(("line ", "memory ")), (
                response.json()
            )
        elif data.draw(st.booleans(), label="next tenant"):
            tenants.append(Caller(f"fuzz-target-{len(tenants)}", scopes=ADMIN, embedder=HASHING))

    attack()
    # The run's size, for the record; both kinds of answer must have come.
    print(f"\nimport fuzz: {EXAMPLES} bodies, answers {answered}, {time.perf_counter() - started:.1f} s")
    assert answered.get(200, 0) >= EXAMPLES // 20 and answered.get(400, 0) >= EXAMPLES // 2, answered
