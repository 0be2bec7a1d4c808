"""Each request's serializer binds fields of its own, though they are built once per class
(``memory_platform.api.serializers.StrictSerializer.get_fields``): what one request's context
says (its tenant's dimension) never reaches another's fields."""

from types import SimpleNamespace

from episodes.api.serializers import TurnsInSerializer
from retrieval.api.serializers import SearchInSerializer


def test_two_requests_at_once_each_validate_by_their_own_tenant():
    three = SearchInSerializer(
        data={"vector": [1.0, 2.0, 3.0]}, context={"tenant": SimpleNamespace(embedding_dim=3)}
    )
    four = SearchInSerializer(
        data={"vector": [1.0, 2.0, 3.0]}, context={"tenant": SimpleNamespace(embedding_dim=4)}
    )
    mine, theirs = three.fields["vector"], four.fields["vector"]  # both bound before either validates
    assert mine is not theirs and mine.child is not theirs.child
    assert (mine.root, mine.child.root, theirs.root) == (three, three, four)
    assert three.is_valid(), three.errors
    assert not four.is_valid() and "vector" in four.errors


def test_the_templates_stay_unbound_and_a_nested_serializer_is_copied_whole():
    first = TurnsInSerializer(data={}).fields
    second = TurnsInSerializer(data={}).fields
    assert first["turns"] is not second["turns"] and first["turns"].child is not second["turns"].child
    templates = TurnsInSerializer._templates()
    assert all(getattr(field, "parent", None) is None for field in templates.values())
    assert SearchInSerializer._templates()["vector"].child.parent is SearchInSerializer._templates()["vector"]
