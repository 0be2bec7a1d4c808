import pytest
from django.db import connection

from memory_platform.tenancy.models import ApiKey
from memory_platform.tenancy.services import api_key_create, api_key_revoke
from tests.conftest import Caller

pytestmark = pytest.mark.django_db


def _all_text_in_database() -> str:
    """Every text-like value of every table of the public schema, concatenated."""
    chunks = []
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        for (table,) in cursor.fetchall():
            cursor.execute(f'SELECT t::text FROM "{table}" t')  # noqa: S608 - names from the catalog
            chunks.extend(row[0] for row in cursor.fetchall())
    return "\n".join(chunks)


def test_whoami_names_the_tenant_of_the_key(caller):
    response = caller.get("/api/v1/whoami")
    assert response.status_code == 200
    assert response.json()["tenant"] == "acme"
    assert response.json()["tenant_id"] == str(caller.tenant.id)
    assert set(response.json()["scopes"]) == {"read", "write"}


def test_the_secret_of_a_key_is_not_stored_anywhere(caller):
    prefix, _, secret_part = caller.secret.partition(".")
    dump = _all_text_in_database()
    assert prefix in dump  # the lookup prefix is stored: the dump really holds the keys table
    assert secret_part not in dump
    assert caller.secret not in dump


def test_no_key_is_401_with_the_error_envelope(client):
    response = client.get("/api/v1/whoami")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_a_wrong_key_is_401(caller):
    caller.client.credentials(HTTP_AUTHORIZATION=f"Bearer {caller.secret[:-2]}xx")
    assert caller.get("/api/v1/whoami").status_code == 401


def test_a_revoked_key_is_401(caller):
    assert caller.get("/api/v1/whoami").status_code == 200
    api_key_revoke(key=caller.key, actor="service", now=caller.key.created)
    response = caller.get("/api/v1/whoami")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_a_read_scoped_key_cannot_write(db):
    reader = Caller("reader", scopes=("read",))
    assert reader.get("/api/v1/whoami").status_code == 200
    response = reader.post("/api/v1/memories", {"text": "the sky is blue"})
    assert response.status_code == 403
    assert "write" in response.json()["error"]["message"]


def test_a_second_key_of_the_outsider_sees_only_the_outsider(caller, outsider):
    assert (
        caller.get("/api/v1/whoami").json()["tenant_id"] != outsider.get("/api/v1/whoami").json()["tenant_id"]
    )
    assert outsider.get("/api/v1/whoami").json()["tenant"] == "outsider"


def test_last_used_at_is_recorded(caller):
    assert caller.key.last_used_at is None
    caller.get("/api/v1/whoami")
    assert ApiKey.objects.across_tenants("test").get(pk=caller.key.pk).last_used_at is not None


def test_unknown_scope_is_refused(caller):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        api_key_create(
            tenant=caller.tenant, name="bad", scopes=["root"], actor="service", now=caller.key.created
        )
