from __future__ import annotations

from typing import Any

from rest_framework import serializers

from episodes.api.serializers import MemoryIdField
from memory_platform.api.serializers import NOT_BLANK, StrictSerializer, VectorField, scope_field

LAYERS = ["hot", "warm", "cold"]
MIN_SCORE_HELP = (
    "leave out hits whose best cosine similarity to the query (between its embedding and any turn of "
    "the memory, whatever its layer; -1 to 1) is below this; each hit then shows its `similarity`"
)


class ScopeFilters(serializers.Serializer):
    user_id = scope_field()
    agent_id = scope_field()
    session_id = scope_field()


class SearchInSerializer(StrictSerializer, ScopeFilters):
    query = serializers.CharField(
        required=False, allow_blank=True, max_length=4000, default="", trim_whitespace=False
    )
    vector = VectorField()
    kinds = serializers.ListField(
        child=serializers.CharField(max_length=50), required=False, default=list, max_length=20
    )
    tags = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, default=list, max_length=20
    )
    occurred_from = serializers.DateTimeField(required=False)
    occurred_to = serializers.DateTimeField(required=False)
    layers = serializers.ListField(
        child=serializers.ChoiceField(choices=LAYERS),
        required=False,
        default=lambda: list(LAYERS),
        allow_empty=False,
    )
    limit = serializers.IntegerField(required=False, min_value=1, max_value=100, default=10)
    depth = serializers.ChoiceField(
        choices=["shallow", "deep"],
        required=False,
        default="shallow",
        help_text="shallow: each hit shows the turns chosen for the question within `max_tokens` (a "
        "packed one beside its packed shape); deep: every hit whole",
    )
    view = serializers.ChoiceField(
        choices=["compact", "full"],
        required=False,
        default="compact",
        help_text="compact: each hit as its text (its chosen turns as `role: text` lines, after a packed "
        "one's key points or headline) with its id, layer, score and date; full: each hit in its "
        "layer's shape with every field (title, scope, entities, decisions, turn count, turns with "
        "their ids and metadata)",
    )
    max_tokens = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=100_000,
        help_text="tokens (about four characters each) of turns the answer shows across its hits, "
        "chosen by each turn's own relevance: the best turns of any hit while they fit, so a hit far "
        "down may show none; a packed hit's key points or headline count too (default "
        "`MEMORY_SEARCH_MAX_TOKENS`; `depth=deep` shows every hit whole)",
    )
    snippet_neighbours = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=10,
        help_text="how far on either side of a matched turn its neighbours are put forward for "
        "showing (default 1)",
    )
    include_dormant = serializers.BooleanField(
        required=False,
        default=True,
        help_text="false: active memories only (by default every memory not forgotten is searched, "
        "dormant ones and delete candidates ranked lower)",
    )
    explain = serializers.BooleanField(required=False, default=False)
    hops = serializers.BooleanField(
        required=False,
        help_text="follow one hop from the best candidates: memories sharing a rare entity with one of "
        "them, or linked from one, join the candidates below it (default: the platform's "
        "MEMORY_SEARCH_HOPS); a hit reached this way says so in `explain` and its use counts as a traversal",
    )
    min_score = serializers.FloatField(
        required=False, min_value=-1.0, max_value=1.0, help_text=MIN_SCORE_HELP
    )

    # The rule of validate(), for the API schema. (A time range that ends before it starts is
    # valid and selects nothing.)
    schema_rules = {
        "anyOf": [
            {"required": ["query"], "properties": {"query": {"pattern": NOT_BLANK}}},
            {"required": ["vector"], "properties": {"vector": {"type": "array"}}},
        ]
    }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs.get("query", "").strip() and attrs.get("vector") is None:
            raise serializers.ValidationError({"query": ["give a query, a vector, or both"]})
        return attrs


class ActivateInSerializer(StrictSerializer, ScopeFilters):
    kind = serializers.CharField(max_length=50)
    query = serializers.CharField(
        required=False, allow_blank=True, max_length=4000, default="", trim_whitespace=False
    )
    limit = serializers.IntegerField(required=False, min_value=1, max_value=50)


class ContextInSerializer(StrictSerializer, ScopeFilters):
    query = serializers.CharField(
        required=False, allow_blank=True, max_length=4000, default="", trim_whitespace=False
    )
    max_tokens = serializers.IntegerField(required=False, min_value=50, max_value=200_000, default=2000)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=50, default=10)
    min_score = serializers.FloatField(
        required=False, min_value=-1.0, max_value=1.0, help_text="relevant memories only: " + MIN_SCORE_HELP
    )
    ids = serializers.BooleanField(
        required=False,
        default=False,
        help_text="the text names each memory by its id (and a relevant one's score), within the budget",
    )


class FeedbackInSerializer(StrictSerializer):
    used = serializers.ListField(child=MemoryIdField(), required=False, default=list, max_length=200)
    unused = serializers.ListField(child=MemoryIdField(), required=False, default=list, max_length=200)

    # The first rule of validate(), for the API schema. (A memory in both lists is a 409: the
    # request contradicts itself, which a schema cannot say.)
    schema_rules = {
        "anyOf": [
            {"required": ["used"], "properties": {"used": {"minItems": 1}}},
            {"required": ["unused"], "properties": {"unused": {"minItems": 1}}},
        ]
    }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs["used"] and not attrs["unused"]:
            raise serializers.ValidationError({"used": ["name at least one memory, used or unused"]})
        return attrs
