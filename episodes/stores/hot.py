"""The hot tier in Redis (redisvl). Each tenant has its own index over its own keys, and the
tenant filter is also added here, inside every query, so no caller can forget it; callers pass a
tenant, never a raw filter or index. Making, dropping and collecting the indexes is
``hot_indexes``'s.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import redis
from redisvl.query import BaseQuery, CountQuery, FilterQuery, VectorQuery
from redisvl.query.filter import FilterExpression, Num, Tag
from redisvl.utils.token_escaper import TokenEscaper

from memory_platform.conf import memory_settings
from memory_platform.redis_client import Client, get_redis, info_field, on_owner_of, refusing_writes

from .. import language
from ..scope import OWNER_FIELDS, Scope
from . import hot_replies, keys
from .hot_documents import SIGNATURE, TurnDoc, episode_documents, epoch, signature_of
from .hot_indexes import HotIndexes
from .hot_replies import HotHit

HotUnavailable = (redis.RedisError, OSError)


def unavailable_reason(exc: BaseException) -> str:
    """What a failed hot-index call means, for a caller."""
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return "Redis is full (maxmemory, noeviction): it refuses writes"
    return f"the hot index is unavailable ({type(exc).__name__})"


# RediSearch's scorer for the hot tier's full text: BM25.
TEXT_SCORER = "BM25STD"


@dataclass(frozen=True)
class Feedback:
    """Pseudo-relevance feedback for the KNN query (Rocchio): the query vector is moved towards
    the vectors of the ``docs`` best BM25 hits, by ``weight`` of their mean. A question names
    what it asks about in words the stored turns share ("Caroline", "support group"); the moved
    vector then finds the turns near those, which the question's own embedding ranks far down
    (docs/decisions/0003)."""

    docs: int
    weight: float


_RETURN_FIELDS = ["episode", "turn_id"]
_ESCAPER = TokenEscaper()


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def moved_towards(vector: np.ndarray, found: list[np.ndarray], weight: float) -> np.ndarray:
    """The unit query vector plus ``weight`` times the mean of the documents' unit vectors
    (``Feedback``); the query itself when there are none."""
    query = _unit(np.asarray(vector, dtype=np.float32))
    if not found:
        return query
    return _unit(query + weight * np.mean([_unit(np.asarray(v, dtype=np.float32)) for v in found], axis=0))


def _vector_query(
    vector: np.ndarray, expr: FilterExpression, k: int, policy: str, return_fields: list[str] = _RETURN_FIELDS
) -> VectorQuery:
    return VectorQuery(
        vector=np.asarray(vector, dtype=np.float32).tobytes(),
        vector_field_name="embedding",
        return_fields=return_fields,
        filter_expression=expr,
        num_results=k,
        dtype="float32",
        hybrid_policy=policy,
    )


#: The most branches a union RediSearch reads may have. Above 20 (its ``UNION_ITERATOR_HEAP``) it
#: walks a union through a heap, and in Chinese mode that walk can spin forever, deaf even to PING
#: and to the query's ``TIMEOUT``, when a word is one its Chinese tokenizer finds nothing in (a
#: character outside its dictionary: most of Unicode's letters, rare ideographs included; see
#: docs/decisions/0066-no-union-walked-through-a-heap.md).
UNION_BRANCHES = 20


def _union(words: list[str]) -> str:
    """``words`` as a union no part of which has more than ``UNION_BRANCHES`` branches: as they
    are up to that many, else in parenthesised groups. RediSearch's parser merges the union written
    first into the one around it and keeps the others whole, so the outer union has the first
    group's branches and one more for each other group; the groups are as small as keeps it within
    the bound."""
    if len(words) <= UNION_BRANCHES:
        return " | ".join(words)
    size = next(s for s in range(2, UNION_BRANCHES + 1) if s + -(-len(words) // s) - 1 <= UNION_BRANCHES)
    groups = (words[i : i + size] for i in range(0, len(words), size))
    return " | ".join(f"({' | '.join(group)})" for group in groups)


def _words_query(
    words: tuple[str, ...], expr: FilterExpression, k: int, analysed_in: str, *, every: bool
) -> FilterQuery:
    """BM25 over the documents in ``expr`` holding ``every`` word, or any of them. The words are
    ``language.query_terms``'s, so neither query is longer than its caps (docs/decisions/0037)."""
    escaped = [_ESCAPER.escape(word) for word in words]
    query = FilterQuery(
        filter_expression=f"@text:({' '.join(escaped) if every else _union(escaped)}) {expr}",
        return_fields=_RETURN_FIELDS,
        num_results=k,
    )
    return query.scorer(TEXT_SCORER).with_scores().language(analysed_in)


class HotStore(HotIndexes):
    """Redis-backed hot index for one deployment; every method takes the tenant explicitly."""

    def __init__(self, client: Client | None = None, reader: Client | None = None):
        self.client = client or get_redis()
        #: The client of the searches a request waits on: its socket timeout is short
        #: (``memory_platform.redis_client``).
        self.reader = reader or (client if client is not None else get_redis(quick=True))
        self._ensured: set[str] = set()
        self._ballasted: set[str] = set()
        self._legacy_dropped = False
        self._idf_wraps: bool | None = None

    # --- writes ------------------------------------------------------------------------------------
    def index_episode(self, episode: Any, docs: Iterable[TurnDoc]) -> int:
        """``index_episodes`` for one episode."""
        return self.index_episodes([(episode, docs)])

    def index_episodes(
        self, episodes: Iterable[tuple[Any, Iterable[TurnDoc]]], *, new: Collection[int] = ()
    ) -> int:
        """Write each episode's document and its turn documents, those whose content changed (a
        new turn, the one before it whose window now reads it, a retag): each document carries a
        signature of what it holds (``hot_documents``). Rewriting one leaves a dead copy that BM25
        counts until it is collected (``GC_SETTINGS``), so a turn arriving in a long session does
        not rewrite the whole session. ``new``: episodes just created, which have no documents to
        compare with. Two round trips at most, however many episodes. Returns the documents
        written."""
        wanted: dict[str, dict[str, Any]] = {}
        fresh: dict[str, dict[str, Any]] = {}
        for episode, docs in episodes:
            self.ensure_index(episode.tenant_id.hex)
            (fresh if episode.pk in new else wanted).update(episode_documents(episode, docs))
        held: dict[str, Any] = {}
        if wanted:
            pipe = self.client.pipeline(transaction=False)
            for key in wanted:
                pipe.hget(key, SIGNATURE)
            held = dict(zip(wanted, pipe.execute(), strict=True))
        pipe = self.client.pipeline(transaction=False)
        written = 0
        for key, mapping in {**wanted, **fresh}.items():
            signature = signature_of(mapping)
            signed = held.get(key)
            if signed is not None and hot_replies.text(signed) == signature:
                continue
            pipe.hset(key, mapping={**mapping, SIGNATURE: signature})  # type: ignore[arg-type,dict-item]
            written += 1
        if written:
            pipe.execute()
        return written

    def update_episode_fields(self, episode: Any, turn_ids: Iterable[int], **fields: str) -> None:
        """Change tag fields (state, anchor, kind...) on an episode's documents in place."""
        tenant_hex = episode.tenant_id.hex
        pipe = self.client.pipeline(transaction=False)
        docs = [keys.episode_key(tenant_hex, episode.pk)] + [keys.turn_key(tenant_hex, t) for t in turn_ids]
        for key in docs:
            # HSET on a missing key would create a half document; only touch existing ones.
            pipe.exists(key)
        present = pipe.execute()
        pipe = self.client.pipeline(transaction=False)
        for key, exists in zip(docs, present, strict=True):
            if exists:
                # Changed in place: its signature no longer says what it holds.
                pipe.hset(key, mapping={**fields, SIGNATURE: ""})  # type: ignore[arg-type,dict-item]
        pipe.execute()

    def remove_episode(self, tenant_hex: str, episode_id: int, turn_ids: Iterable[int]) -> int:
        docs = [keys.episode_key(tenant_hex, episode_id)] + [keys.turn_key(tenant_hex, t) for t in turn_ids]
        return int(self.client.unlink(*docs))

    def drop_tenant(self, tenant_hex: str) -> int:
        """Remove the tenant's documents and its index (the index first: deleting documents from
        a live index costs an index update each)."""
        bases = (keys.INDEX_BASE, *keys.REINDEXED_BASES, *keys.OUTDATED_BASES)
        names = [
            spelling(tenant_hex, a, base)
            for spelling in (keys.index_name, keys.untagged_index_name)
            for base in bases
            for a in keys.ALGORITHMS
        ]
        self._drop_indexes(names)
        self._ensured.difference_update(names)
        self._ballasted.discard(tenant_hex)
        removed = 0
        batch: list[str] = []
        # The tenant's keys are all in its slot: only its master is scanned.
        owner = on_owner_of(self.client, keys.tenant_tag(tenant_hex))
        for key in self.client.scan_iter(match=keys.tenant_pattern(tenant_hex), count=1000, **owner):
            batch.append(key)
            if len(batch) >= 1000:
                removed += int(self.client.unlink(*batch))
                batch = []
        if batch:
            removed += int(self.client.unlink(*batch))
        return removed

    # --- reads -------------------------------------------------------------------------------------
    def _filter(self, tenant_hex: str, doctype: str, scope: Scope) -> FilterExpression:
        """The scope in RediSearch's terms (see ``episodes.scope``), inside the tenant's documents.
        Every document here is hot, so ``layers`` is the caller's to honour."""
        expr = (Tag("tenant") == tenant_hex) & (Tag("doctype") == doctype)
        for name in OWNER_FIELDS:
            value = getattr(scope, name)
            if value is not None:
                expr &= Tag(name) == keys.exact(value)
        if scope.kinds:
            expr &= Tag("kind") == [keys.exact(kind) for kind in scope.kinds]
        if scope.tags and scope.all_tags:
            for tag in scope.tags:
                expr &= Tag("tags") == keys.exact(tag)
        elif scope.tags:
            expr &= Tag("tags") == [keys.exact(tag) for tag in scope.tags]
        if scope.episode_ids:
            expr &= Tag("episode") == [str(e) for e in scope.episode_ids]
        if scope.states:
            expr &= Tag("state") == list(scope.states)
        if scope.anchor is not None:
            expr &= Tag("anchor") == ("1" if scope.anchor else "0")
        if scope.occurred_from is not None:
            expr &= Num("occurred_at") >= epoch(scope.occurred_from)
        if scope.occurred_to is not None:
            expr &= Num("occurred_at") <= epoch(scope.occurred_to)
        if scope.older_than is not None:
            expr &= Num("occurred_at") < epoch(scope.older_than)
        return expr

    def search(
        self,
        tenant_hex: str,
        *,
        vector: np.ndarray | None,
        text: str | None,
        scope: Scope,
        k: int,
        doctype: str = keys.DOC_TURN,
        feedback: Feedback | None = None,
        with_vectors: bool = False,
    ) -> tuple[list[HotHit], list[HotHit], dict[str, np.ndarray]]:
        """KNN and BM25 over the tenant's hot documents: (vector hits, text hits, the vectors of
        the text hits the query moved towards), hits best first.

        With feedback (and both a vector and query words), BM25 runs first and the KNN query is
        the vector moved towards the best text hits' vectors (see ``Feedback``); ``with_vectors``:
        each vector hit comes with its vector."""
        text_hits = self.text_search(tenant_hex, text=text, scope=scope, k=k, doctype=doctype) if text else []
        if vector is None:
            return [], text_hits, {}
        found: dict[str, np.ndarray] = {}
        if feedback is not None and feedback.docs > 0 and text_hits:
            found = self.doc_vectors([h.doc_id for h in text_hits[: feedback.docs]])
            vector = moved_towards(vector, list(found.values()), feedback.weight)
        vector_hits = self.vector_search(
            tenant_hex, vector=vector, scope=scope, k=k, doctype=doctype, with_vectors=with_vectors
        )
        return vector_hits, text_hits, found

    def text_search(
        self, tenant_hex: str, *, text: str, scope: Scope, k: int, doctype: str = keys.DOC_TURN
    ) -> list[HotHit]:
        """BM25 over the tenant's hot documents, best first; those holding every word of the query
        before those holding fewer (as ``archive.text_search`` ranks Postgres's matches).

        A second query finds the documents holding every word; the BM25 of the query's words
        ranks each group. Why: inside the scope's filter RediSearch 2.10 credits a union with one
        of its words, not with all a document holds, so "новая шина" scored a turn with both words
        as one with "новую" alone; and it credits an intersection's words unevenly, by the order it
        reads the documents in, which changes when Redis restarts (docs/decisions/0041). Both are
        pipelined in one round trip; only the fields used are read from the replies (redisvl's own
        result processing costs more than Redis takes to answer)."""
        # Stopwords are dropped here, once (a query of stopwords alone would be "@text:()", a
        # syntax error; and RediSearch 8.2 crashes on some unions of stopwords).
        # Each document is analysed in its own language (its `language` field); the query in the
        # language it is written in (Chinese segmented here, as the documents were).
        words = language.query_terms(text).words
        if not words:
            return []
        expr = self._filter(tenant_hex, doctype, scope)
        analysed_in = language.REDISEARCH[language.query_language(text)]
        passes = (False, True) if len(words) > 1 else (False,)
        queries = [_words_query(words, expr, k, analysed_in, every=every) for every in passes]
        replies = self._run(tenant_hex, *queries, client=self.reader)
        ranked = hot_replies.hits(replies[0], distance=False)
        if len(replies) == 1:
            return ranked
        every = {hit.doc_id: hit for hit in hot_replies.hits(replies[1], distance=False)}
        found = {hit.doc_id for hit in ranked}
        # Those holding every word first; any of them below the first k of the union next.
        first = [hit for hit in ranked if hit.doc_id in every]
        first += [hit for doc_id, hit in every.items() if doc_id not in found]
        return (first + [hit for hit in ranked if hit.doc_id not in every])[:k]

    def vector_search(
        self,
        tenant_hex: str,
        *,
        vector: np.ndarray,
        scope: Scope,
        k: int,
        doctype: str = keys.DOC_TURN,
        with_vectors: bool = False,
    ) -> list[HotHit]:
        """KNN over the tenant's hot documents, best first, by cosine similarity (``with_vectors``:
        each with its vector, to be compared with another query vector)."""
        fields = [*_RETURN_FIELDS, "embedding"] if with_vectors else _RETURN_FIELDS
        query = _vector_query(
            vector, self._filter(tenant_hex, doctype, scope), k, _hybrid_policy(scope), fields
        )
        return hot_replies.hits(self._run(tenant_hex, query, client=self.reader)[0], distance=True)

    def _run(self, tenant_hex: str, *queries: BaseQuery, client: Client | None = None) -> list[Any]:
        """FT.SEARCH each query on the tenant's index, pipelined in one round trip; the raw replies
        in order. Each query asks RediSearch to give up after ``HOT_QUERY_TIMEOUT_MS`` (the module
        runs with ``ON_TIMEOUT FAIL``: an error, never a partial answer).

        An index this process made may be missing: dropped meanwhile (an erasure, `rebuild_hot` in
        another process), or left on the master its tenant's slot moved from (resharding); it is
        made again (scanning the documents there) and the queries sent once more."""
        client = client or self.client
        index = self.ensure_index(tenant_hex)
        try:
            return self._search(client, index, queries)
        except redis.ResponseError as exc:
            if "no such index" not in str(exc).lower():
                raise
        self._ensured.discard(index)
        self._ballasted.discard(tenant_hex)  # dropped with its documents, perhaps
        return self._search(client, self.ensure_index(tenant_hex), queries)

    def _search(self, client: Client, index: str, queries: tuple[BaseQuery, ...]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        timeout = int(memory_settings.HOT_QUERY_TIMEOUT_MS)
        # Sent to the master of the tenant's slot: RediSearch routes by the index name, redis-py
        # would not (``on_owner_of``).
        owner = on_owner_of(client, index)
        for query in queries:
            query.timeout(timeout)
            params = [part for name, value in (query.params or {}).items() for part in (name, value)]
            pipe.execute_command(
                "FT.SEARCH",
                index,
                *query.get_args(),
                *(["PARAMS", len(params), *params] if params else []),
                **owner,
            )
        return pipe.execute()  # type: ignore[no-any-return]

    def doc_vectors(self, doc_ids: list[str]) -> dict[str, np.ndarray]:
        """The vectors of these documents (those still there), as the KNN index holds them."""
        if not doc_ids:
            return {}
        pipe = self.reader.pipeline(transaction=False)
        for doc_id in doc_ids:
            pipe.hget(doc_id, "embedding")
        return {
            doc_id: np.frombuffer(raw, dtype=np.float32)
            for doc_id, raw in zip(doc_ids, pipe.execute(), strict=True)
            if raw
        }

    def episode_ids(self, tenant_hex: str, scope: Scope | None = None, limit: int = 10_000) -> set[int]:
        """Ids of the tenant's hot episodes that have an episode document."""
        query = FilterQuery(
            filter_expression=self._filter(tenant_hex, keys.DOC_EPISODE, scope or Scope()),
            return_fields=["episode"],
            num_results=limit,
        )
        return {
            int(info_field(fields, "episode"))
            for _, _, fields in hot_replies.entries(self._run(tenant_hex, query)[0], with_scores=False)
        }

    def refusing_writes(self) -> str:
        """Why Redis refuses writes now ("" when it takes them)."""
        return refusing_writes(self.client)

    def count(self, tenant_hex: str, doctype: str = keys.DOC_TURN) -> int:
        expr = self._filter(tenant_hex, doctype, Scope())
        return hot_replies.total(self._run(tenant_hex, CountQuery(filter_expression=expr))[0])


def _hybrid_policy(scope: Scope) -> str:
    """How RediSearch applies the filter to a KNN query. BATCHES walks the vector index and
    filters what it meets: right when the filter keeps most of the index, as the tenant's active
    turns are of its own index. ADHOC_BF computes the distance of every document the filter
    keeps: exact, and cheap when they are few (a session, kind, tag, time window); see
    docs/decisions/0003."""
    return "ADHOC_BF" if scope.narrowed else "BATCHES"


_store: HotStore | None = None


def hot_store() -> HotStore:
    global _store
    if _store is None:
        _store = HotStore()
    return _store
