"""``MemoryClient`` and ``AsyncMemoryClient``: one typed method per endpoint of ``/api/v1``.

Both build the same requests (``_Api``); they differ only in how a request is sent. A request is
retried, with backoff, only when sending it again cannot do anything twice: reads (``GET``, and the
searches sent as ``POST``) and idempotent writes, after a connection error, a 429 (waiting what
``Retry-After`` says) or a 503. Appending turns or writing a memory is never retried.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from .errors import RateLimited, Unavailable, error_for
from .types import (
    ActivationAnswerJson,
    CandidatePageJson,
    CandidateReviewJson,
    ContextAnswerJson,
    ErasureConfirmJson,
    ErasureReceiptJson,
    FeedbackCountsJson,
    ForgottenJson,
    ImportSummaryJson,
    LinkMadeJson,
    LinksRemovedJson,
    Memory,
    MemoryJson,
    Page,
    PinnedJson,
    PolicyPreviewJson,
    SearchResults,
    SoftForgottenJson,
    TenantStatsJson,
    Turn,
    TurnsWritten,
    UnpackedMemoryJson,
    WhoAmIJson,
)

DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class _Call:
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    content: bytes | None = None
    content_type: str | None = None
    #: Safe to send twice (a read, or a write whose second time changes nothing).
    retry: bool = False
    parse: Any = None


def _clean(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _turns(turns: Iterable[Turn | dict[str, Any]]) -> list[dict[str, Any]]:
    return [t.as_json() if isinstance(t, Turn) else dict(t) for t in turns]


class _Api:
    """The endpoints, as calls; ``_send`` is the sync or async client's."""

    def _send(self, call: _Call) -> Any:  # pragma: no cover - defined by each client
        raise NotImplementedError

    # --- writing ------------------------------------------------------------------------------
    def add_turns(
        self,
        session_id: str,
        turns: Sequence[Turn | dict[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        asynchronous: bool = False,
    ) -> TurnsWritten:
        """Append turns to a session (durable before the answer); ``asynchronous`` for bulk."""
        body = _clean(
            {"session_id": session_id, "user_id": user_id, "agent_id": agent_id, "metadata": metadata}
        )
        body.update(turns=_turns(turns), **({"async": True} if asynchronous else {}))
        return self._send(_Call("POST", "/turns", json=body, parse=TurnsWritten.from_json))

    def add_memory(self, text: str, **fields: Any) -> Memory:
        """An explicit memory (a fact, a preference): ``kind``, ``title``, ``tags``, ``anchor``,
        ``user_id``, ``occurred_at``, ``metadata``..."""
        return self._send(_Call("POST", "/memories", json={"text": text, **fields}, parse=Memory.from_json))

    # --- reading ------------------------------------------------------------------------------
    def search(self, query: str, **filters: Any) -> SearchResults:
        """Hybrid search over every layer: ``limit``, ``user_id``, ``session_id``, ``kinds``,
        ``tags``, ``layers``, ``view``, ``depth``, ``min_score``, ``vector``..."""
        return self._send(
            _Call(
                "POST", "/search", json={"query": query, **filters}, retry=True, parse=SearchResults.from_json
            )
        )

    def context(self, query: str, **options: Any) -> ContextAnswerJson:
        """Prompt-ready context within a token budget."""
        return self._send(_Call("POST", "/context", json={"query": query, **options}, retry=True))

    def activate(self, **options: Any) -> ActivationAnswerJson:
        """The top memories of a kind."""
        return self._send(_Call("POST", "/activate", json=options, retry=True))

    def get_memory(self, memory_id: str, *, deep: bool = False) -> Memory:
        params = {"depth": "deep"} if deep else None
        return self._send(
            _Call("GET", f"/memories/{memory_id}", params=params, retry=not deep, parse=Memory.from_json)
        )

    def list_memories(self, *, cursor: str | None = None, limit: int | None = None, **filters: Any) -> Page:
        """One page of memories (``user_id``, ``session_id``, ``kind``, ``layer``, ``state``, ``tag``...)."""
        params = _clean({"cursor": cursor, "limit": limit, **filters})
        return self._send(
            _Call(
                "GET",
                "/memories",
                params=params,
                retry=True,
                parse=lambda b: Page([Memory.from_json(m) for m in b["results"]], b.get("next_cursor")),
            )
        )

    def whoami(self) -> WhoAmIJson:
        return self._send(_Call("GET", "/whoami", retry=True))

    def stats(self) -> TenantStatsJson:
        return self._send(_Call("GET", "/stats", retry=True))

    def get_policy(self) -> dict[str, Any]:
        return self._send(_Call("GET", "/policy", retry=True))

    # --- managing -----------------------------------------------------------------------------
    def unpack(self, memory_id: str) -> UnpackedMemoryJson:
        """Restore a packed memory whole, back to hot."""
        return self._send(_Call("POST", f"/memories/{memory_id}/unpack", retry=True))

    def feedback(self, *, used: Sequence[str] = (), unused: Sequence[str] = ()) -> FeedbackCountsJson:
        return self._send(_Call("POST", "/feedback", json={"used": list(used), "unused": list(unused)}))

    def forget(self, memory_id: str) -> ForgottenJson:
        """Soft forget one memory (restorable for the grace period)."""
        return self._send(_Call("DELETE", f"/memories/{memory_id}", retry=True))

    def forget_where(self, **filters: Any) -> SoftForgottenJson:
        """Soft forget by filter or by retrievability (``dry_run`` first, if unsure)."""
        return self._send(_Call("POST", "/forget", json=filters))

    def candidates(
        self, *, status: str = "proposed", kind: str | None = None, limit: int | None = None
    ) -> CandidatePageJson:
        """Merge and delete proposals with both memories side by side (scope ``admin``)."""
        params = _clean({"status": status, "kind": kind, "limit": limit})
        return self._send(_Call("GET", "/candidates", params=params, retry=True))

    def approve_candidate(self, candidate_id: str) -> CandidateReviewJson:
        """Apply a proposal softly (forget, or link and forget), journaled (scope ``admin``)."""
        return self._send(_Call("POST", f"/candidates/{candidate_id}/approve"))

    def reject_candidate(self, candidate_id: str) -> CandidateReviewJson:
        return self._send(_Call("POST", f"/candidates/{candidate_id}/reject"))

    def restore(self, memory_id: str) -> MemoryJson:
        return self._send(_Call("POST", f"/memories/{memory_id}/restore", retry=True))

    def link(self, memory_id: str, target_id: str, kind: str = "related") -> LinkMadeJson:
        return self._send(
            _Call(
                "POST",
                f"/memories/{memory_id}/links",
                json={"target_id": target_id, "kind": kind},
                retry=True,
            )
        )

    def unlink(self, memory_id: str, target_id: str, kind: str | None = None) -> LinksRemovedJson:
        body = _clean({"target_id": target_id, "kind": kind})
        return self._send(_Call("DELETE", f"/memories/{memory_id}/links", json=body))

    def pin(self, memory_id: str) -> PinnedJson:
        """Make a memory an anchor: it never decays, never goes cold."""
        return self._send(_Call("POST", f"/memories/{memory_id}/anchor", retry=True))

    def unpin(self, memory_id: str) -> PinnedJson:
        return self._send(_Call("DELETE", f"/memories/{memory_id}/anchor", retry=True))

    def update_policy(self, **fields: Any) -> dict[str, Any]:
        return self._send(_Call("PATCH", "/policy", json=fields, retry=True))

    def preview_policy(self, **fields: Any) -> PolicyPreviewJson:
        return self._send(_Call("POST", "/policy/preview", json=fields, retry=True))

    # --- data rights --------------------------------------------------------------------------
    def export(self, **filters: Any) -> bytes:
        """The tenant's memory as JSON lines (``user_id``, ``session_id``, ``since``, ``until``)."""
        return self._send(_Call("GET", "/export", params=_clean(filters), retry=True, parse=bytes))

    def import_lines(self, body: bytes, *, source: str | None = None) -> ImportSummaryJson:
        """JSON lines in: this platform's export, mem0 memories or turns (idempotent)."""
        return self._send(
            _Call(
                "POST",
                "/import",
                params=_clean({"source": source}),
                content=body,
                content_type="application/x-ndjson",
                retry=True,
            )
        )

    def erase_tenant_data(self, *, confirm: str | None = None) -> ErasureConfirmJson | ErasureReceiptJson:
        """Without ``confirm``: the token and what would go. With it: the erasure's receipt."""
        return self._send(_Call("DELETE", "/tenant-data", json=_clean({"confirm": confirm})))

    def erase_user(
        self, user_id: str, *, confirm: str | None = None
    ) -> ErasureConfirmJson | ErasureReceiptJson:
        """A person's memory, for good (two calls, as ``erase_tenant_data``)."""
        return self._send(
            _Call("POST", "/forget", json=_clean({"user_id": user_id, "erase": True, "confirm": confirm}))
        )


def _settings(url: str | None, api_key: str | None) -> tuple[str, str]:
    base = (url or os.environ.get("MEMORY_URL") or DEFAULT_URL).rstrip("/")
    key = api_key or os.environ.get("MEMORY_API_KEY")
    if not key:
        raise ValueError("no API key: pass api_key= or set MEMORY_API_KEY")
    return base + "/api/v1", key


def _result(call: _Call, response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = None
        raise error_for(response.status_code, body, response.headers)
    if call.parse is bytes:
        return response.content
    body = response.json()
    return call.parse(body) if call.parse else body


def _wait(attempt: int, error: Exception | None) -> float:
    if isinstance(error, RateLimited) and error.retry_after is not None:
        return error.retry_after
    return min(8.0, 0.5 * 2**attempt)


def _request(call: _Call) -> dict[str, Any]:
    headers = {"Content-Type": call.content_type} if call.content_type else None
    return {
        "method": call.method,
        "url": call.path,
        "json": call.json,
        "params": call.params,
        "content": call.content,
        "headers": headers,
    }


class MemoryClient(_Api):
    """The platform's API, synchronously. ``url`` defaults to ``$MEMORY_URL`` (else
    http://127.0.0.1:8000), ``api_key`` to ``$MEMORY_API_KEY``."""

    def __init__(
        self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0, retries: int = 3
    ):
        base, key = _settings(url, api_key)
        self.retries = retries
        self._http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=timeout)

    def _send(self, call: _Call) -> Any:
        for attempt in range(self.retries + 1):
            try:
                return _result(call, self._http.request(**_request(call)))
            except (RateLimited, Unavailable) as exc:
                if not call.retry or attempt == self.retries:
                    raise
                time.sleep(_wait(attempt, exc))
            except httpx.TransportError as exc:
                if not call.retry or attempt == self.retries:
                    raise Unavailable(f"cannot reach the platform: {exc}", status=0) from exc
                time.sleep(_wait(attempt, None))
        raise AssertionError("unreachable")

    def iter_memories(self, **filters: Any) -> Iterator[Memory]:
        """Every memory the filters name, page after page."""
        cursor = None
        while True:
            page = self.list_memories(cursor=cursor, **filters)
            yield from page.memories
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMemoryClient(_Api):
    """The same methods as ``MemoryClient``, each a coroutine."""

    def __init__(
        self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0, retries: int = 3
    ):
        base, key = _settings(url, api_key)
        self.retries = retries
        self._http = httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=timeout
        )

    async def _send(self, call: _Call) -> Any:  # type: ignore[override]
        for attempt in range(self.retries + 1):
            try:
                return _result(call, await self._http.request(**_request(call)))
            except (RateLimited, Unavailable) as exc:
                if not call.retry or attempt == self.retries:
                    raise
                await asyncio.sleep(_wait(attempt, exc))
            except httpx.TransportError as exc:
                if not call.retry or attempt == self.retries:
                    raise Unavailable(f"cannot reach the platform: {exc}", status=0) from exc
                await asyncio.sleep(_wait(attempt, None))
        raise AssertionError("unreachable")

    async def iter_memories(self, **filters: Any) -> AsyncIterator[Memory]:
        cursor = None
        while True:
            page = await self.list_memories(cursor=cursor, **filters)  # type: ignore[misc]
            for memory in page.memories:
                yield memory
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
