"""The OpenAPI schema tells the truth. schemathesis generates requests from the schema (valid
ones, and ones that break it) against the real application on the real embedded servers, and runs
every check it has: no server errors, no undocumented status codes or content types, responses that
match their schemas, schema-valid requests accepted, schema-violating ones refused, authentication
enforced.

The test settings lift the rate limits (``memory_platform/settings_test.py``): the run's thousands
of requests, and its probes with no key or a wrong one, are answered as one client's would be.
With the limits on, a wrong key past ``MEMORY_AUTH_FAILURE_LIMIT`` is a 429, which the schema
states but schemathesis's authentication check does not take in place of a 401."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.generation.meta import negated_parameters
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from memory_platform.wsgi import application
from tests.conftest import Caller

# The schema alone says what is refused, the NUL character in every string included
# (``memory_platform.api.schema.without_nul``): no generation setting here.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


CALLS = {"requests": 0, "operations": set(), "unauthorised": 0}


@pytest.fixture(scope="module", autouse=True)
def _count():
    yield
    # The run's size, for the record (its figures go in the hardening notes).
    print(
        f"\nschemathesis: {CALLS['requests']} requests over {len(CALLS['operations'])} operations, every check "
        f"({CALLS['unauthorised']} negative ones without their Authorization mutation: not asserted refused)"
    )


@pytest.fixture
def tenant_key(db):
    caller = Caller(
        "schemathesis", scopes=("read", "write", "admin"), embedder="tests.hashing_embedder.HashingEmbedder"
    )
    # Something to find, link, pin and forget: ids 1.. exist for the path parameters.
    caller.post("/api/v1/memories", {"text": "Ana is allergic to peanuts.", "user_id": "ana"})
    caller.post("/api/v1/turns", {"turns": [{"role": "user", "text": "We booked the cabin."}]})
    return caller


@pytest.mark.django_db(transaction=True)
@schema.parametrize()
@settings(
    max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
def test_every_operation_keeps_to_its_schema(case, tenant_key):
    # The key of a tenant made for this test (the authentication checks also send none, or a
    # wrong one, on their own).
    CALLS["requests"] += 1
    CALLS["operations"].add(case.operation.label)
    # A negative case whose mutations include leaving out the Authorization header is sent with
    # the header all the same. When its only other mutations are in the query, what is left may be
    # valid (schemathesis's query mutation is sometimes an unnamed parameter, which never reaches
    # the server), so refusing it is not asserted; every other check still runs on it.
    meta = case._meta
    negative = (
        {location.value for location, info in meta.components.items() if info.mode.is_negative}
        if meta
        else set()
    )
    unauthorised = "Authorization" in {name for name, _ in negated_parameters(meta)} and negative <= {
        "header",
        "query",
    }
    CALLS["unauthorised"] += unauthorised
    excluded = [negative_data_rejection] if unauthorised else []
    if case.operation.path == "/api/v1/import":
        # Its body is JSON lines of three formats, which a JSON schema cannot describe: any string
        # is schema-valid, and most strings are not an import (a 400 naming the line). Every other
        # check still runs on it; tests/lifecycle/test_data_rights.py covers what it accepts.
        excluded.append(positive_data_acceptance)
    case.call_and_validate(
        headers={"Authorization": f"Bearer {tenant_key.secret}"}, excluded_checks=excluded or None
    )
