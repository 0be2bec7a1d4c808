"""`GET/PATCH /api/v1/policy` and `POST /api/v1/policy/preview` (scope admin): validated
as the console's form, every change recorded, the preview writes nothing."""

from __future__ import annotations

import pytest
from django.utils import timezone

from lifecycle.models import JournalEntry, PolicyChange, TickRun, policy_row
from tests.conftest import Caller

from .factories import conversation

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def operator(provided) -> Caller:
    now = timezone.now()  # the API previews at the real now
    for n, days in enumerate([1, 5, 30, 60, 200]):
        conversation(provided.tenant, session=f"s{n}", idle_days=days, seed=n, now=now)
    return Caller("provided-co", scopes=("admin",), tenant=provided.tenant)


def test_read_and_change_the_policy_recorded_with_the_key(operator, outsider):
    body = operator.get("/api/v1/policy").json()
    assert body["hot_days"] == 14 and "llm_api_key" not in body and "tenant" not in body

    changed = operator.client.patch("/api/v1/policy", {"hot_days": 7, "llm_api_key": "sk-1"}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["hot_days"] == 7 and policy_row(operator.tenant).hot_days == 7
    record = PolicyChange.objects.across_tenants("test").get(tenant=operator.tenant)
    assert record.actor == f"api:{operator.key.prefix}"
    assert record.changes == {"hot_days": [14, 7], "llm_api_key": ["(empty)", "(set)"]}
    assert policy_row(outsider.tenant).hot_days == 14  # another tenant's policy is untouched


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"hot_days": -1}, 400),  # a field's own rule, in the schema
        ({"hot_days": "7"}, 400),
        ({"rrf_vector_weight": 1.5}, 400),
        ({"tenant": "x"}, 400),
        ({"updated_at": "2020-01-01T00:00:00Z"}, 400),
        ({"llm_base_url": "ftp://llm"}, 400),
        ({"purge_grace_days": 10_000_000}, 400),  # schemathesis: a tick then took a date out of range
        ({"hot_days": 400}, 409),  # a rule between fields: hot_days < cold_days
        ({"summariser": "llm"}, 409),  # without llm_base_url and llm_model
    ],
)
def test_a_bad_change_is_refused_and_changes_nothing(operator, body, status):
    before = policy_row(operator.tenant).updated_at
    response = operator.client.patch("/api/v1/policy", body, format="json")
    assert response.status_code == status, (body, response.content)
    assert (
        policy_row(operator.tenant).updated_at == before
        and not PolicyChange.objects.across_tenants("test").exists()
    )


def test_only_an_admin_key_reads_or_changes_the_policy(provided):
    assert provided.get("/api/v1/policy").status_code == 403
    assert provided.client.patch("/api/v1/policy", {"hot_days": 7}, format="json").status_code == 403
    assert provided.post("/api/v1/policy/preview", {"hot_days": 7}).status_code == 403


def test_the_preview_answers_moves_and_writes_nothing(operator):
    before = (
        TickRun.objects.across_tenants("test").count(),
        JournalEntry.objects.across_tenants("test").count(),
        policy_row(operator.tenant).hot_days,
    )
    saved = operator.post("/api/v1/policy/preview", {}).json()
    sooner = operator.post("/api/v1/policy/preview", {"hot_days": 2, "cold_days": 20}).json()
    assert sooner["fields"] == ["cold_days", "hot_days"]
    assert sooner["counts"]["hot_to_warm"] > saved["counts"].get("hot_to_warm", 0), (saved, sooner)
    assert sooner["samples"]["hot_to_warm"]
    assert (
        TickRun.objects.across_tenants("test").count(),
        JournalEntry.objects.across_tenants("test").count(),
        policy_row(operator.tenant).hot_days,
    ) == before
    assert operator.post("/api/v1/policy/preview", {"hot_days": 400}).status_code == 409
