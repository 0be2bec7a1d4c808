"""The policy: defaults, validation twice (clean() and the database), presets, tenant isolation."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from fsrs.scheduler import DEFAULT_PARAMETERS

from lifecycle.models import JournalEntry, MemoryPolicy, TickRun, policy_row
from lifecycle.presets import PRESETS, apply_preset
from memory_platform.tenancy.services import tenant_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant():
    return tenant_create(name="acme")


@pytest.fixture
def outsider():
    return tenant_create(name="outsider")


def test_policy_row_creates_the_defaults_once(tenant):
    policy = policy_row(tenant)
    assert policy.pk and policy_row(tenant).pk == policy.pk
    assert MemoryPolicy.objects.across_tenants("test").filter(tenant=tenant).count() == 1
    assert tenant.policy == policy
    assert (policy.coef_in, policy.coef_out, policy.coef_access, policy.coef_traverse) == (1.0, 0.8, 1.2, 0.8)
    assert (policy.coef_recent_access, policy.coef_recent_link, policy.coef_age) == (1.5, 1.0, 0.3)
    assert (policy.t_access_hours, policy.t_link_hours, policy.t_age_days) == (24, 72, 30)
    assert (policy.hot_days, policy.cold_days, policy.hot_cap_per_session, policy.activation_limit) == (
        14,
        90,
        50,
        3,
    )
    assert (policy.rrf_vector_weight, policy.rrf_text_weight, policy.rrf_k) == (0.5, 0.5, 10)
    assert policy.fsrs_parameters == list(DEFAULT_PARAMETERS) and policy.desired_retention == 0.9
    assert (
        policy.adr_decay_factor == 0.99
        and policy.preset == "metabolism"
        and policy.summariser == "extractive"
    )
    assert (policy.episode_gap_seconds, policy.episode_split_similarity, policy.episode_max_turns) == (
        1800,
        0.1,
        12,
    )
    policy.full_clean()


BAD_VALUES = [
    ({"theta_delete": 0.6, "theta_active": 0.5}, "theta_delete", "must be lower than theta_active"),
    ({"hot_days": 90, "cold_days": 90}, "hot_days", "must be lower than cold_days"),
    ({"warm_points_min": 9, "warm_points_max": 8}, "warm_points_min", "must not exceed warm_points_max"),
    ({"coef_age": -0.1}, "coef_age", "must not be negative"),
    ({"t_access_hours": 0}, "t_access_hours", "at least 1e-06"),
    ({"t_age_days": -30}, "t_age_days", "at least 1e-06"),
    ({"rrf_vector_weight": 1.5}, "rrf_vector_weight", "between 0 and 1"),
    ({"desired_retention": 1.0}, "desired_retention", "strictly between 0 and 1"),
    ({"desired_retention": 0.0}, "desired_retention", "strictly between 0 and 1"),
    ({"priority_relevance_weight": 0.5}, "priority_recency_weight", "add up to at most 1"),
    (
        {"priority_cold_at_or_below": 0.8},
        "priority_cold_at_or_below",
        "must be lower than priority_hot_above",
    ),
    ({"merge_similarity": 1.2}, "merge_similarity", "between 0 and 1"),
    ({"fsrs_parameters": [0.1] * 20}, "fsrs_parameters", "list of 21 numbers"),
]


@pytest.mark.parametrize(("values", "field", "message"), BAD_VALUES)
def test_clean_refuses_bad_values_naming_the_field(tenant, values, field, message):
    policy = MemoryPolicy(tenant=tenant, **values)
    with pytest.raises(ValidationError) as caught:
        policy.full_clean()
    assert field in caught.value.message_dict
    assert any(message in m and field in m for m in caught.value.message_dict[field])


def test_clean_checks_fsrs_bounds_and_llm_settings(tenant):
    out_of_bounds = [*DEFAULT_PARAMETERS[:4], 50.0, *DEFAULT_PARAMETERS[5:]]
    with pytest.raises(ValidationError) as caught:
        MemoryPolicy(tenant=tenant, fsrs_parameters=out_of_bounds).full_clean()
    assert "parameters[4] = 50.0 is out of bounds" in caught.value.message_dict["fsrs_parameters"][0]
    with pytest.raises(ValidationError) as caught:
        MemoryPolicy(tenant=tenant, fsrs_parameters=["a"] * 21).full_clean()
    assert "only numbers" in caught.value.message_dict["fsrs_parameters"][0]
    with pytest.raises(ValidationError) as caught:
        MemoryPolicy(tenant=tenant, summariser="llm").full_clean()
    assert set(caught.value.message_dict) >= {"llm_base_url", "llm_model"}
    # the tenant already has its policy (made with the tenant), so skip the one-per-tenant check
    MemoryPolicy(
        tenant=tenant, summariser="llm", llm_base_url="http://llm:8000/v1", llm_model="m"
    ).full_clean(validate_unique=False)
    with pytest.raises(ValidationError) as caught:
        MemoryPolicy(tenant=tenant, summariser="llm", llm_base_url="ftp://x", llm_model="m").full_clean()
    assert "must be an http(s) URL" in caught.value.message_dict["llm_base_url"][0]


@pytest.mark.parametrize(
    "values",
    [
        {"theta_delete": 0.6},
        {"hot_days": 100},
        {"warm_points_min": 20},
        {"coef_in": -1.0},
        {"t_link_hours": 0.0},
        {"rrf_text_weight": -0.2},
        {"desired_retention": 1.0},
        {"priority_anchor_weight": 0.9},
        {"retrievability_cold_at_or_below": 0.95},
        {"adr_decay_factor": 1.5},
        {"fsrs_parameters": [1.0] * 5},
        {"fsrs_parameters": {"w": 1}},
        {"layer_rule": "vibes"},
    ],
)
def test_database_refuses_bad_values(tenant, values):
    policy = policy_row(tenant)
    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryPolicy.objects.across_tenants("test").filter(pk=policy.pk).update(**values)
    with pytest.raises(IntegrityError), transaction.atomic():
        MemoryPolicy.objects.create(tenant=tenant_create(name="other"), **values)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_is_valid_and_sets_its_seed(tenant, name):
    policy = policy_row(tenant)
    policy.hot_quota = 1234  # not governed by any preset: an operator's override survives
    apply_preset(policy, name)
    policy.full_clean()
    policy.save()
    policy.refresh_from_db()
    assert policy.preset == name and policy.hot_quota == 1234
    for field, value in PRESETS[name].items():
        assert getattr(policy, field) == value


def test_preset_values_reproduce_the_seeds(tenant):
    policy = policy_row(tenant)
    apply_preset(policy, "adr")
    assert (policy.layer_rule, policy.adr_decay_factor, policy.adr_archive_after_days) == (
        "weight",
        0.99,
        1.0,
    )
    assert (policy.adr_archive_weight, policy.adr_archive_significance) == (0.3, 0.5)
    assert (policy.activation_limit, policy.hot_cap_per_session) == (3, 50)
    apply_preset(policy, "lsm")
    assert (policy.layer_rule, policy.priority_hot_above, policy.priority_cold_at_or_below) == (
        "priority",
        0.7,
        0.3,
    )
    apply_preset(policy, "fsrs")
    assert policy.layer_rule == "retrievability" and policy.fsrs_parameters == list(DEFAULT_PARAMETERS)
    apply_preset(policy, "metabolism")
    assert policy.layer_rule == "activity" and policy.coef_recent_access == 1.5
    with pytest.raises(ValueError, match="unknown preset"):
        apply_preset(policy, "chaos")


def test_another_tenants_change_does_not_touch_ours(tenant, outsider):
    ours, theirs = policy_row(tenant), policy_row(outsider)
    assert ours.pk != theirs.pk
    theirs.hot_days = 3
    apply_preset(theirs, "lsm")
    theirs.full_clean()
    theirs.save()
    ours.refresh_from_db()
    assert ours.hot_days == 14 and ours.preset == "metabolism" and ours.layer_rule == "activity"
    assert policy_row(tenant).hot_days == 14


def test_policy_is_deleted_with_its_tenant_and_journal_survives_an_episode(tenant):
    run = TickRun.objects.create(tenant=tenant, now_used=timezone.now(), counts={"warm": 2})
    entry = JournalEntry.objects.create(
        tenant=tenant, action="demote_warm", episode_id_value=42, before={"layer": "hot"}, tick_run=run
    )
    assert entry.episode is None and run.journal_entries.get() == entry
    policy_row(tenant)
    tenant.delete()
    assert (
        not MemoryPolicy.objects.across_tenants("test").exists()
        and not JournalEntry.objects.across_tenants("test").exists()
    )


def test_admin_pages_and_preset_action(client, tenant, outsider):
    admin = get_user_model().objects.create_superuser("op", "op@example.com", "pw")
    client.force_login(admin)
    ours, theirs = policy_row(tenant), policy_row(outsider)
    assert client.get(reverse("admin:lifecycle_memorypolicy_changelist")).status_code == 200
    page = client.get(reverse("admin:lifecycle_memorypolicy_change", args=[ours.pk]))
    assert page.status_code == 200
    # The activity score's rules, folded under their group, each in an operator's words.
    assert b"Activity score" in page.content and b"Weight of the links pointing at a memory." in page.content
    response = client.post(
        reverse("admin:lifecycle_memorypolicy_changelist"),
        {"action": "apply_lsm", "_selected_action": [ours.pk]},
    )
    assert response.status_code == 302
    ours.refresh_from_db()
    theirs.refresh_from_db()
    assert ours.preset == "lsm" and theirs.preset == "metabolism"
    TickRun.objects.create(tenant=tenant, now_used=timezone.now())
    JournalEntry.objects.create(tenant=tenant, action="forget", episode_id_value=7)
    assert client.get(reverse("admin:lifecycle_tickrun_changelist")).status_code == 200
    assert client.get(reverse("admin:lifecycle_journalentry_changelist"), {"q": "7"}).status_code == 200
    assert client.get(reverse("admin:lifecycle_journalentry_add")).status_code == 403


def test_admin_form_applies_a_preset_on_save(client, tenant):
    import json

    from django.forms.models import model_to_dict

    admin = get_user_model().objects.create_superuser("op", "op@example.com", "pw")
    client.force_login(admin)
    ours = policy_row(tenant)
    data = {k: v for k, v in model_to_dict(ours).items() if k not in ("id", "tenant")}
    data.update(preset="fsrs", apply_preset_now="on", fsrs_parameters=json.dumps(ours.fsrs_parameters))
    url = reverse("admin:lifecycle_memorypolicy_change", args=[ours.pk])
    response = client.post(url, data)
    assert response.status_code == 302, response.content[:2000]
    ours.refresh_from_db()
    assert ours.preset == "fsrs" and ours.layer_rule == "retrievability"
    # a bad value is refused with the field named, and nothing is saved
    data.update(preset="lsm", apply_preset_now="", theta_delete="0.9", theta_active="0.5")
    response = client.post(url, data)
    assert (
        response.status_code == 200
        and b"theta_delete (0.9) must be lower than theta_active" in response.content
    )
    ours.refresh_from_db()
    assert ours.preset == "fsrs"


def test_a_new_tenant_gets_its_policy_at_once(db):
    from memory_platform.tenancy.services import tenant_create

    tenant = tenant_create(name="fresh-policy")
    assert MemoryPolicy.objects.across_tenants("test").filter(tenant=tenant).count() == 1
    assert MemoryPolicy.objects.across_tenants("test").get(tenant=tenant).preset == "metabolism"
