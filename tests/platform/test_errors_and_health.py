import pytest
from django.conf import settings


def test_unknown_route_is_a_json_404(client):
    response = client.get("/api/v1/no-such-thing")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.django_db
def test_wrong_method_is_a_json_405(caller):
    response = caller.delete("/api/v1/whoami")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_healthz(client):
    assert client.get("/healthz").json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_reports_versions(client):
    body = client.get("/readyz").json()
    assert body["status"] == "ok"
    assert body["checks"]["postgres"]["version"].startswith("18")
    assert body["checks"]["postgres"]["pgvector"].startswith("0.8")
    assert body["checks"]["redis"]["version"].startswith("8.")
    assert body["checks"]["redis"]["search"].startswith("2.")


@pytest.mark.django_db
def test_readyz_is_503_naming_redis_while_it_is_stopped(client):
    redis_server = settings.EMBEDDED_REDIS
    assert redis_server is not None
    redis_server.stop()
    try:
        response = client.get("/readyz")
        assert response.status_code == 503
        body = response.json()
        assert body["checks"]["redis"]["ok"] is False
        assert "redis" in body["error"]["message"]
        assert body["checks"]["postgres"]["ok"] is True
    finally:
        redis_server.start()
    assert client.get("/readyz").status_code == 200


def test_openapi_schema_is_served(client):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert "/api/v1/whoami" in response.content.decode()


def test_swagger_ui_is_served(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    assert b"swagger" in response.content.lower()
