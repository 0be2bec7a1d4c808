"""A LangGraph ``BaseStore`` (its long-term memory interface) backed by the platform: ``MemoryStore``.

    pip install "./clients/python[langgraph]"

    from memory_platform_client.langgraph_store import MemoryStore
    store = MemoryStore(url="http://127.0.0.1:8000", api_key="...")
    store.put(("alice", "memories"), "food", {"text": "Alice loves mapo tofu"})

Each item is one memory of kind ``langgraph`` (``kind=``), written through the REST API:

- **Namespace to scope.** ``scopes`` names, position by position, the scope field a namespace label
  fills. The default ``("user_id",)`` makes ``("alice", "memories")`` a memory of user ``alice``, so
  the platform's own search, context, export and erasure of that user include it. ``None`` skips a
  position (``(None, "user_id")`` for ``("memories", "alice")``); ``()`` maps nothing.
- **Exact addressing.** The namespace, key and whole value are the memory's
  ``metadata["langgraph"]``. Its tags name the item (``langgraph:item#<sha256>``) and each prefix of
  its namespace (``langgraph:ns:alice.memories``; LangGraph's labels hold no dot, so the dotted form
  is unambiguous; hashed past 100 characters). Get, delete and search under a prefix filter by tag
  on the server; every answer is checked against the metadata, so a tag the server trims or a cold
  memory's keyword never lets another item through.
- **Text.** What a search with a query finds: the value's strings (its JSON when it has none), or
  the fields the store's ``index_fields`` or a put's ``index=[...]`` name (LangGraph's path syntax).
  The platform embeds and indexes every memory, so ``index=False`` (or fields the value lacks) is
  kept by the store: the memory's text is then the item's path, and a search with a query never
  returns the item; a search without one lists it.
- **Put over a key.** The platform updates no memory in place: a put writes a new memory, then
  forgets the older ones of the key. Get answers the newest, so a reader never finds the key
  missing meanwhile; ``created_at`` carries over. Delete forgets (softly: an operator can restore it
  within the grace period); the platform leaves forgotten memories out of every list and search.
- **Filters** (exact values, ``$eq $ne $gt $gte $lt $lte``) are applied here, to the values.
- **TTL** is not supported (``supports_ttl = False``): the platform's policy decays memories instead.
  ``anchor=True`` pins every item (it never decays, never goes cold, is never a merge candidate).

HTTP calls per operation: get 1; put 2 (3 when it replaces a value); delete 1; a search with a
query 1, plus one read per new hit (a hit carries no metadata), and again with more hits (at most
100) when a filter leaves too few; a search without one, 1 a page of memories; list_namespaces
reads every memory under its fixed prefix, 200 a page.

Each operation is written once, as a generator of the client calls it needs: ``batch`` makes them
with the ``MemoryClient``, ``abatch`` with the ``AsyncMemoryClient`` (the calls of one step at once),
or runs ``batch`` in a thread when the store has none. The operations of a batch run in order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
)

from .client import AsyncMemoryClient, MemoryClient
from .errors import NotFound
from .langgraph_items import (
    META,
    SCOPE_FIELDS,
    Record,
    check_op,
    fixed_prefix,
    item_tag,
    matches,
    matches_condition,
    namespace_tag,
    strings_of,
)

#: The platform's default MAX_TURN_CHARS; a longer text is cut (the value stays whole in metadata).
TEXT_CHARS = 32_000
#: The most a page of GET /memories holds, and the most hits POST /search answers.
PAGE, HITS = 200, 100

T = TypeVar("T")


@dataclass(frozen=True)
class _Call:
    """One call of a client method; with ``missing_ok`` a 404 (forgotten meanwhile) answers None."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    missing_ok: bool = False


#: An operation: it yields the calls of each step, receives their answers, returns its result.
_Steps = Generator[list[_Call], list[Any], T]


def _one(method: str, *args: Any, missing_ok: bool = False, **kwargs: Any) -> _Steps[Any]:
    (answer,) = yield [_Call(method, args, kwargs, missing_ok)]
    return answer


class MemoryStore(BaseStore):
    """LangGraph's ``BaseStore`` on the platform (see the module's docstring for the mapping).

    ``client`` (and ``async_client`` for the async methods; without it they run the sync ones in a
    thread), or ``url`` and ``api_key`` (else ``$MEMORY_URL``, ``$MEMORY_API_KEY``): then the store
    makes both clients and closes them in ``close`` / ``aclose``. ``scopes``: the scope field each
    namespace position fills. ``index_fields``: the fields whose text a search with a query finds
    (default: every string of the value). ``kind``: the memories' kind. ``anchor``: pin every item.
    """

    supports_ttl = False

    def __init__(
        self,
        client: MemoryClient | None = None,
        *,
        async_client: AsyncMemoryClient | None = None,
        url: str | None = None,
        api_key: str | None = None,
        scopes: Sequence[str | None] = ("user_id",),
        index_fields: Sequence[str] | None = None,
        kind: str = "langgraph",
        anchor: bool = False,
    ):
        named = [name for name in scopes if name is not None]
        unknown = sorted(set(named) - set(SCOPE_FIELDS))
        if unknown or len(set(named)) != len(named):
            raise ValueError(
                f"scopes names each of {SCOPE_FIELDS} at most once, or None; got {tuple(scopes)}"
            )
        self._owns_clients = client is None and async_client is None
        if self._owns_clients:
            client, async_client = MemoryClient(url, api_key), AsyncMemoryClient(url, api_key)
        elif url is not None or api_key is not None:
            raise ValueError("give clients or url and api_key, not both")
        self.client, self.async_client = client, async_client
        self.scopes = tuple(scopes)
        self.index_fields = list(index_fields) if index_fields is not None else None
        self.kind = kind
        self.anchor = anchor

    # --- BaseStore --------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if self.client is None:
            raise RuntimeError("this store has an AsyncMemoryClient only: use its async methods")
        ops = list(ops)
        for op in ops:
            check_op(op)
        return [self._run(self._steps(op)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if self.async_client is None:
            return await asyncio.to_thread(self.batch, ops)
        for op in ops:
            check_op(op)
        return [await self._arun(self._steps(op)) for op in ops]

    def close(self) -> None:
        """Close the sync client the store made (an async one: ``aclose``)."""
        if self._owns_clients and self.client is not None:
            self.client.close()

    async def aclose(self) -> None:
        """Close the clients the store made."""
        self.close()
        if self._owns_clients and self.async_client is not None:
            await self.async_client.aclose()

    # --- sending the calls ------------------------------------------------------------------------
    def _run(self, steps: _Steps[T]) -> T:
        try:
            calls = next(steps)
            while True:
                calls = steps.send([self._send(call) for call in calls])
        except StopIteration as done:
            return done.value

    async def _arun(self, steps: _Steps[T]) -> T:
        try:
            calls = next(steps)
            while True:
                calls = steps.send(list(await asyncio.gather(*(self._asend(call) for call in calls))))
        except StopIteration as done:
            return done.value

    def _send(self, call: _Call) -> Any:
        try:
            return getattr(self.client, call.method)(*call.args, **call.kwargs)
        except NotFound:
            if call.missing_ok:
                return None
            raise

    async def _asend(self, call: _Call) -> Any:
        try:
            return await getattr(self.async_client, call.method)(*call.args, **call.kwargs)
        except NotFound:
            if call.missing_ok:
                return None
            raise

    # --- the operations ---------------------------------------------------------------------------
    def _steps(self, op: Op) -> _Steps[Result]:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, PutOp):
            return self._put(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise ValueError(f"unknown operation: {type(op).__name__}")

    def _get(self, op: GetOp) -> _Steps[Item | None]:
        found = yield from self._listed(
            self._filters(op.namespace, item_tag(op.namespace, op.key)),
            lambda r: (r.namespace, r.key) == (op.namespace, op.key),
            wanted=1,
            page=10,
        )
        return found[0].item() if found else None

    def _put(self, op: PutOp) -> _Steps[None]:
        tag = item_tag(op.namespace, op.key)
        if op.value is None:
            yield from _one("forget_where", kind=self.kind, tags=[tag])
            return None
        older = yield from self._listed(
            self._filters(op.namespace, tag), lambda r: (r.namespace, r.key) == (op.namespace, op.key)
        )
        value = dict(op.value)
        texts = self._texts(value, op.index)
        path = "/".join((*op.namespace, op.key))
        mine: dict[str, Any] = {
            "namespace": list(op.namespace),
            "key": op.key,
            "value": value,
            "indexed": bool(texts),
        }
        if older:  # newest first
            mine["created_at"] = older[0].created_at.isoformat()
        fields: dict[str, Any] = {
            "kind": self.kind,
            "title": path[:200],
            "tags": [*(namespace_tag(op.namespace[:n]) for n in range(1, len(op.namespace) + 1)), tag],
            "metadata": {META: mine},
            "anchor": self.anchor,
            **self._scope(op.namespace),
        }
        yield from _one("add_memory", ("\n".join(texts) if texts else path)[:TEXT_CHARS], **fields)
        # After the write, so that a get finds the old value or the new one, never none.
        if older:
            yield [_Call("forget", (r.memory_id,), missing_ok=True) for r in older]
        return None

    def _search(self, op: SearchOp) -> _Steps[list[SearchItem]]:
        prefix = op.namespace_prefix

        def keep(r: Record) -> bool:
            return r.namespace[: len(prefix)] == prefix and matches(r.value, op.filter)

        wanted = op.offset + op.limit
        if not op.query:
            page = PAGE if op.filter else min(PAGE, max(wanted, 1))
            records = yield from self._listed(self._filters(prefix), keep, wanted=wanted, page=page)
            return [r.search_item() for r in records[op.offset :]]
        found = yield from self._found(op.query, prefix, lambda r: r.indexed and keep(r), wanted)
        return [r.search_item(score) for r, score in found[op.offset :]]

    def _list_namespaces(self, op: ListNamespacesOp) -> _Steps[list[tuple[str, ...]]]:
        conditions = op.match_conditions or ()
        records = yield from self._listed(
            self._filters(fixed_prefix(conditions)),
            lambda r: all(matches_condition(c, r.namespace) for c in conditions),
        )
        depth = op.max_depth
        namespaces = {r.namespace[:depth] if depth is not None else r.namespace for r in records}
        return sorted(namespaces)[op.offset : op.offset + op.limit]

    # --- helpers ----------------------------------------------------------------------------------
    def _scope(self, namespace: tuple[str, ...]) -> dict[str, str]:
        """The scope fields the labels of ``namespace`` (or of a prefix) fill."""
        return {name: label for name, label in zip(self.scopes, namespace, strict=False) if name is not None}

    def _filters(self, namespace: tuple[str, ...], tag: str | None = None) -> dict[str, Any]:
        """GET /memories filters: the store's memories under ``namespace`` (or of the item ``tag``)."""
        filters: dict[str, Any] = {"kind": self.kind, **self._scope(namespace)}
        if tag or namespace:
            filters["tag"] = tag or namespace_tag(namespace)
        return filters

    def _texts(self, value: dict[str, Any], index: Literal[False] | list[str] | None) -> list[str]:
        """What a search with a query should find in ``value``: none for ``index=False``."""
        if index is False:
            return []
        paths = index if index is not None else self.index_fields
        if paths is None:
            texts = strings_of(value) or [json.dumps(value, sort_keys=True, ensure_ascii=False)]
        else:
            texts = [text for path in paths for text in get_text_at_path(value, path)]
        return [text for text in texts if text.strip()]

    def _listed(
        self,
        filters: dict[str, Any],
        keep: Callable[[Record], bool],
        *,
        wanted: int | None = None,
        page: int = PAGE,
    ) -> _Steps[list[Record]]:
        """The items of the memories ``filters`` select that ``keep`` keeps, newest first: every one,
        or the first ``wanted``. One call a page."""
        kept: list[Record] = []
        cursor = None
        while wanted is None or len(kept) < wanted:
            listed = yield from _one("list_memories", cursor=cursor, limit=page, **filters)
            kept.extend(r for m in listed.memories if (r := Record.of(m.raw)) is not None and keep(r))
            cursor = listed.next_cursor
            if not cursor:
                break
        return kept if wanted is None else kept[:wanted]

    def _found(
        self, query: str, prefix: tuple[str, ...], keep: Callable[[Record], bool], wanted: int
    ) -> _Steps[list[tuple[Record, float]]]:
        """The platform's hits for ``query`` under ``prefix`` that ``keep`` keeps, best first, with
        their scores: the first ``wanted``. A hit carries no metadata, so each is read once; when
        ``keep`` leaves too few, the search is asked again for twice as many (at most ``HITS``)."""
        if wanted <= 0:
            return []
        filters: dict[str, Any] = {"kinds": [self.kind], **self._scope(prefix)}
        if prefix:
            filters["tags"] = [namespace_tag(prefix)]
        records: dict[str, Record | None] = {}
        size = min(wanted, HITS)
        while True:
            results = yield from _one("search", query, limit=size, **filters)
            new = [hit.episode_id for hit in results.hits if hit.episode_id not in records]
            if new:
                memories = yield [_Call("get_memory", (memory_id,), missing_ok=True) for memory_id in new]
                records.update(
                    (memory_id, Record.of(m.raw) if m is not None else None)
                    for memory_id, m in zip(new, memories, strict=True)
                )
            kept = [
                (record, hit.score)
                for hit in results.hits
                if (record := records[hit.episode_id]) is not None and keep(record)
            ]
            if len(kept) >= wanted or len(results.hits) < size or size == HITS:
                return kept[:wanted]
            size = min(2 * size, HITS)
