"""The ``openai`` embedder (docs/decisions/0025): any OpenAI-compatible ``/embeddings`` server, here a
local one that speaks the protocol (``tests/fake_openai.py``)."""

import numpy as np
import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from episodes.models import Episode, Turn
from episodes.tasks import repair_hot_index
from memory_platform.embeddings import EmbeddingError, embedder_for
from memory_platform.embeddings.openai import OpenAIConfig, OpenAIEmbedder
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.services import tenant_create

from ..conftest import Caller, unit_vectors
from ..fake_openai import EmbeddingsServer, hashed
from ..retrieval.test_search import search, turns


@pytest.fixture
def server():
    server = EmbeddingsServer(dim=256, key="sk-tenant").start()
    yield server
    server.stop()


@pytest.fixture
def no_retries(settings):
    settings.MEMORY = {**getattr(settings, "MEMORY", {}), "OPENAI_EMBED_RETRIES": 0}


def openai_caller(name, server, **options):
    tenant = tenant_create(
        name=name,
        embedder="openai",
        embedder_url=server.url,
        embedder_model="multilingual-e5-small",
        embedder_key="sk-tenant",
        embedding_dim=server.dim,
        **options,
    )
    return Caller(name, tenant=tenant)


def embedder(server, retries=2, **config):
    values = {"base_url": server.url, "model": "m", "api_key": "sk-tenant", "dim": server.dim, **config}
    return OpenAIEmbedder(OpenAIConfig(**values), timeout=2, retries=retries)


def test_vectors_come_in_batches_in_input_order_padded_to_the_stored_width(server):
    client = embedder(server)
    client.batch = 2
    texts = ["alpha beta", "gamma", "delta epsilon", "beta alpha", "zeta"]
    vectors = client.embed(texts)
    assert vectors.shape == (5, 384)
    assert [len(r["body"]["input"]) for r in server.requests] == [2, 2, 1]
    assert {r["auth"] for r in server.requests} == {"Bearer sk-tenant"}
    assert all("dimensions" not in r["body"] for r in server.requests)
    expected = np.asarray(hashed("delta epsilon", 256))
    assert np.allclose(vectors[2, :256], expected / np.linalg.norm(expected), atol=1e-6)
    assert not vectors[:, 256:].any() and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert np.allclose(vectors[0], vectors[3])  # the same words, whatever the order the server answered in


def test_a_wider_model_is_asked_for_the_tenants_dimension_when_told_to(server):
    server.dim = 1024
    with pytest.raises(EmbeddingError, match="1024-dimensional.*at most 384"):
        embedder(server, dim=384).embed(["x"])
    vectors = embedder(server, dim=384, send_dimensions=True).embed(["x"])
    assert server.requests[-1]["body"]["dimensions"] == 384 and vectors.shape == (1, 384)


def test_errors_say_whether_retrying_can_help(server):
    server.status = 503
    with pytest.raises(EmbeddingError, match="unavailable.*503.*tried 3 times") as busy:
        embedder(server).embed(["x"])
    assert busy.value.retryable and len(server.requests) == 3
    server.requests.clear()
    server.status = 200
    with pytest.raises(EmbeddingError, match="refused the request.*401.*Incorrect API key") as refused:
        embedder(server, api_key="sk-wrong").embed(["x"])
    assert not refused.value.retryable and len(server.requests) == 1  # a wrong key is not retried
    with pytest.raises(EmbeddingError, match="refused the request.*404"):
        embedder(server, base_url=server.url.replace("/v1", "/v2"), retries=0).embed(["x"])
    url = server.url
    server.stop()
    with pytest.raises(EmbeddingError, match="cannot be reached") as down:
        embedder(server, base_url=url, retries=0).embed(["x"])
    assert down.value.retryable


@pytest.mark.django_db(transaction=True)
def test_an_openai_tenant_needs_a_server_a_model_and_a_dimension_it_can_store():
    with pytest.raises(ValidationError) as missing:
        tenant_create(name="no-server", embedder="openai")
    assert {"embedder_url", "embedder_model"} <= set(missing.value.message_dict)
    with pytest.raises(ValidationError, match="1-384"):
        tenant_create(
            name="too-wide",
            embedder="openai",
            embedder_url="http://tei:8080/v1",
            embedder_model="m",
            embedding_dim=1024,
        )
    with pytest.raises(ValidationError, match="only an openai tenant"):
        tenant_create(name="local-256", embedding_dim=256)
    with pytest.raises(CommandError, match="embedder_url"):
        call_command("create_tenant", "cli-no-url", "--embedder", "openai", "--embedder-model", "m")
    call_command(
        "create_tenant", "cli-tei", "--embedder", "openai", "--embedder-url", "http://tei:8080/v1",
        "--embedder-model", "intfloat/multilingual-e5-small", "--embedding-dim", "384",
    )  # fmt: skip
    tenant = Tenant.objects.get(name="cli-tei")
    assert (tenant.embedder_url, tenant.embedding_dim) == ("http://tei:8080/v1", 384)
    assert Tenant.objects.filter(name__in=["no-server", "too-wide", "local-256", "cli-no-url"]).count() == 0


@pytest.mark.django_db(transaction=True)
def test_an_openai_tenant_ingests_and_searches_through_its_server(server, outsider):
    acme = openai_caller("acme-openai", server)
    body = turns(acme, "s1", ["We booked the Lisbon venue for the offsite", "Catering is still open"])
    assert body["searchable"] is True and body["reason"] is None, body["reason"]
    stored = Turn.objects.across_tenants("test").filter(tenant=acme.tenant).exclude(embedding=None).count()
    assert stored == 2 and len(server.requests) >= 2
    found = search(acme, "Lisbon venue offsite", explain=True)
    assert found["degraded"] is False
    top = found["results"][0]
    assert top["explain"]["vector_rank"] is not None and "Lisbon" in top["turns"][0]["text"]
    # A caller's own vector is of the tenant's dimension (stored zero-padded), not the platform's.
    vector = unit_vectors(1, dim=256)[0].tolist()
    assert acme.post("/api/v1/search", {"query": "x", "vector": vector}).status_code == 200
    wrong = acme.post("/api/v1/search", {"query": "x", "vector": unit_vectors(1)[0].tolist()})
    assert wrong.status_code == 400 and "256" in str(wrong.json())
    # The outsider's search reaches nothing of acme's, and its own (local) embedder asks no server.
    before = len(server.requests)
    assert search(outsider, "Lisbon venue offsite")["results"] == []
    assert len(server.requests) == before


@pytest.mark.django_db(transaction=True)
def test_with_the_server_down_ingest_is_durable_and_search_answers_from_full_text(server, no_retries):
    acme = openai_caller("acme-down", server)
    turns(acme, "s1", ["Quarterly numbers go to finance on friday"])
    port = server.server_address[1]
    server.stop()

    body = turns(acme, "s2", ["The Lisbon venue is booked for the offsite"])  # 201 (asserted by turns)
    assert body["searchable"] is False and "cannot be reached" in body["reason"]
    turn = Turn.objects.across_tenants("test").get(tenant=acme.tenant, session_id="s2")
    assert (
        turn.embedding is None
        and Episode.objects.across_tenants("test").get(pk=turn.episode_id).needs_reindex
    )
    memory = acme.post("/api/v1/memories", {"text": "The offsite budget is 12,000 euros"})
    assert memory.status_code == 201, memory.json()

    found = search(acme, "Lisbon venue")
    assert found["degraded"] is True and "answered from full text" in found["degraded_reason"]
    assert "Lisbon" in found["results"][0]["turns"][0]["text"]

    # The server comes back: the repair task embeds and indexes what waited.
    back = EmbeddingsServer(port, dim=256, key="sk-tenant").start()
    try:
        repair_hot_index()
        assert not Turn.objects.across_tenants("test").filter(tenant=acme.tenant, embedding=None).exists()
        assert (
            not Episode.objects.across_tenants("test").filter(tenant=acme.tenant, needs_reindex=True).exists()
        )
        found = search(acme, "Lisbon venue", explain=True)
        assert found["degraded"] is False and found["results"][0]["explain"]["vector_rank"] is not None
    finally:
        back.stop()


@pytest.mark.django_db(transaction=True)
def test_one_tenants_server_down_does_not_stop_the_others_repair(server, no_retries):
    healthy = openai_caller("healthy", server)
    other = EmbeddingsServer(dim=128).start()
    broken = openai_caller("broken", other)
    other.stop()
    turns(broken, "s1", ["waits for its server"])
    turns(healthy, "s1", ["indexed at once"])
    Episode.objects.across_tenants("test").filter(tenant=healthy.tenant).update(needs_reindex=True)
    assert repair_hot_index() == 1
    assert (
        Episode.objects.across_tenants("test").filter(tenant=broken.tenant, needs_reindex=True).count() == 1
    )
    assert embedder_for(broken.tenant) is not embedder_for(healthy.tenant)
