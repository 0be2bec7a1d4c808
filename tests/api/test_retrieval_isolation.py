"""The outsider sees nothing of ours through search, activate, context, unpack or feedback."""

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ours(caller):
    memory = caller.post(
        "/api/v1/memories", {"text": "The vault code is 4471", "kind": "secret", "anchor": True}
    ).json()["id"]
    caller.post("/api/v1/turns", {"session_id": "s1", "turns": [{"role": "user", "text": "vault code talk"}]})
    return memory


def test_outsider_search_activate_context(ours, outsider):
    assert outsider.post("/api/v1/search", {"query": "vault code"}).json()["results"] == []
    assert outsider.post("/api/v1/search", {"query": "vault", "session_id": "s1"}).json()["results"] == []
    assert outsider.post("/api/v1/activate", {"kind": "secret"}).json()["results"] == []
    assert outsider.post("/api/v1/activate", {"kind": "secret", "query": "vault"}).json()["results"] == []
    ctx = outsider.post("/api/v1/context", {"session_id": "s1", "query": "vault code"}).json()
    assert ctx["sections"] == {"anchors": [], "session": [], "relevant": [], "linked": []}
    assert "4471" not in ctx["text"]


def test_outsider_unpack_and_feedback_are_404(ours, outsider):
    assert outsider.post(f"/api/v1/memories/{ours}/unpack").status_code == 404
    assert outsider.post("/api/v1/feedback", {"used": [ours]}).status_code == 404
