"""A new tenant whose policy names Russian or Chinese embeds with the multilingual model; a tenant
that holds memory keeps the model that made its vectors (docs/decisions/0043-multilingual-e5.md)."""

import numpy as np
import pytest
from django.utils import timezone

from episodes.models import Turn
from episodes.services import MemoryInput, TurnInput
from lifecycle.models import policy_row
from lifecycle.services import memory_create, tenant_embedder_settle, turns_ingest
from memory_platform.embeddings import embedder_for_language, get_embedder
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.services import tenant_create

from .factories import set_policy

pytestmark = pytest.mark.django_db(transaction=True)

RUSSIAN = "Собаку назвали Бусинкой, забираем из питомника в мае."


@pytest.mark.parametrize(
    ("embedder", "language", "chosen"),
    [
        ("local", "ru", "e5"),
        ("local", "zh", "e5"),
        ("local", "en", "local"),
        ("local", "auto", "local"),
        ("e5", "ru", "e5"),
        ("provided", "zh", "provided"),
        ("openai", "ru", "openai"),
    ],
)
def test_only_the_english_model_gives_way_and_only_for_a_language_it_reads_poorly(embedder, language, chosen):
    assert embedder_for_language(embedder, language) == chosen


def test_a_new_russian_tenant_embeds_its_first_turns_with_the_multilingual_model():
    tenant = tenant_create(name="ru-co", embedder="local")
    outsider = tenant_create(name="outsider", embedder="local")
    set_policy(tenant, language="ru")
    turns_ingest(tenant=tenant, turns=[TurnInput(role="user", text=RUSSIAN)], now=timezone.now())
    assert tenant.embedder == Tenant.objects.get(pk=tenant.pk).embedder == "e5"
    stored = np.asarray(Turn.objects.across_tenants("test").get(tenant=tenant).embedding, dtype=np.float32)
    assert np.allclose(stored, get_embedder("e5").embed([RUSSIAN])[0], atol=1e-6)  # a passage
    assert Tenant.objects.get(pk=outsider.pk).embedder == "local"


def test_a_chinese_tenants_first_memory_settles_it_too():
    tenant = tenant_create(name="zh-co", embedder="local")
    set_policy(tenant, language="zh")
    memory_create(tenant=tenant, memory=MemoryInput(text="李娜的猫叫咪咪"), now=timezone.now())
    assert Tenant.objects.get(pk=tenant.pk).embedder == "e5"


def test_a_tenant_that_holds_memory_keeps_its_model_when_its_language_changes():
    tenant = tenant_create(name="en-then-ru", embedder="local")
    # Durable only: stored now, embedded by the worker with the tenant's model.
    turns_ingest(
        tenant=tenant, turns=[TurnInput(role="user", text=RUSSIAN)], now=timezone.now(), asynchronous=True
    )
    set_policy(tenant, language="ru")
    turns_ingest(
        tenant=tenant, turns=[TurnInput(role="user", text=RUSSIAN)], now=timezone.now(), asynchronous=True
    )
    assert tenant.embedder == Tenant.objects.get(pk=tenant.pk).embedder == "local"


def test_a_request_that_read_the_tenant_before_another_switched_it_finds_the_switch():
    tenant = tenant_create(name="ru-race", embedder="local")
    set_policy(tenant, language="ru")
    earlier = Tenant.objects.get(pk=tenant.pk)  # loaded by a second request, before the switch
    policy = policy_row(tenant)
    tenant_embedder_settle(tenant=tenant, policy=policy)
    turns_ingest(
        tenant=tenant, turns=[TurnInput(role="user", text=RUSSIAN)], now=timezone.now(), asynchronous=True
    )
    assert earlier.embedder == "local"
    tenant_embedder_settle(tenant=earlier, policy=policy)
    assert earlier.embedder == "e5"
