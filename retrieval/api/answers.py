"""The read path's answers, declared once (``memory_platform.api.answers``) and made here from
what the services return: the services give data, the views make the envelopes."""

from __future__ import annotations

from typing import Annotated, NotRequired, TypedDict

from typing_extensions import Doc

from episodes.models import Layer
from episodes.shapes import CompactHit, Hit

from ..services import SearchResult
from ..shaping import Activation, ShapedSearch


class SearchExplain(TypedDict):
    query_narrowed: Annotated[str | None, Doc("which of the query's words full text left out, and why")]


class SearchAnswer(TypedDict):
    """``POST /search``: the hits, best first, in the view the query asked for."""

    results: list[CompactHit | Hit]
    degraded: Annotated[bool, Doc("a tier or the embedder failed: the answer is partial")]
    degraded_reason: Annotated[str | None, Doc("why it is degraded")]
    stale: Annotated[bool, Doc("some new hot memories were searched in Postgres, not yet indexed")]
    took_ms: float
    explain: NotRequired[Annotated[SearchExplain, Doc("with explain")]]


class ActivationAnswer(TypedDict):
    """``POST /activate``: the top memories of a kind, in the full view."""

    results: list[Hit]
    degraded: bool
    degraded_reason: NotRequired[Annotated[str | None, Doc("when a query ranked them")]]
    stale: NotRequired[Annotated[bool, Doc("when a query ranked them")]]
    took_ms: NotRequired[Annotated[float, Doc("when a query ranked them")]]


class _Degradation(TypedDict):
    degraded: bool
    degraded_reason: str | None
    stale: bool
    took_ms: float


def _degradation(result: SearchResult) -> _Degradation:
    return {
        "degraded": result.degraded,
        "degraded_reason": result.reason or None,
        "stale": result.stale,
        "took_ms": round(result.took_ms, 2),
    }


def search_answer(shaped: ShapedSearch, *, explain: bool) -> SearchAnswer:
    answer: SearchAnswer = {"results": [*shaped.hits], **_degradation(shaped.result)}
    if explain:
        answer["explain"] = {"query_narrowed": shaped.result.narrowed or None}
    return answer


def activation_answer(activation: Activation) -> ActivationAnswer:
    if activation.search is None:  # ranked by the tenant's priority: no search to tell of
        return {"results": activation.hits, "degraded": False}
    return {"results": activation.hits, **_degradation(activation.search)}


class ContextItem(TypedDict):
    episode_id: str
    layer: Annotated[str, Layer]
    text: Annotated[str, Doc("as the context's text shows it")]
    score: NotRequired[Annotated[float, Doc("relevant memories only")]]


class ContextSections(TypedDict):
    """The context's memories by section, in the order of its text."""

    anchors: Annotated[list[ContextItem], Doc("standing facts: pinned memories")]
    session: Annotated[list[ContextItem], Doc("this conversation's latest turns")]
    relevant: list[ContextItem]
    linked: Annotated[list[ContextItem], Doc("what the relevant memories link to")]


class ContextAnswer(TypedDict):
    """``POST /context`` (``retrieval.context``): prompt-ready text within a token budget."""

    sections: ContextSections
    text: Annotated[str, Doc("markdown: one section per kind of memory")]
    tokens: Annotated[int, Doc("estimated tokens of the text")]
    max_tokens: int
    degraded: Annotated[bool, Doc("a tier or the embedder failed: the relevant memories are partial")]
    degraded_reason: Annotated[str | None, Doc("why it is degraded")]
