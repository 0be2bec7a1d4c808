"""The lists of one search from every tier it reaches (hot in Redis, warm and cold in Postgres),
fused once by ``ranking.fuse``: ``retrieval.services.search`` builds one ``Tiers`` per search."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from django.db import connection

from episodes.models import Layer
from episodes.stores import archive
from episodes.stores.hot import hot_store, moved_towards
from episodes.stores.hot_replies import HotHit
from memory_platform import db
from memory_platform.tenancy.models import Tenant

from .query import SearchQuery
from .ranking import Fusion, Match, RetrievalWeights, fuse, interleaved

#: The threads a search runs its parts on while its own thread does another (the packed tier's
#: vector statement and the hot tier here; the preamble while the query is embedded, in
#: ``services.search``).
search_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="search")


class Tiers:
    """The lists of one search from every tier it reaches, fused once (``ranking.fuse``).

    The tiers are searched at the same time: the hot tier in a worker thread (BM25, then KNN with
    the query moved towards its best matches), the packed turns' vector candidates on a second
    connection, full text in Postgres on this thread's. Then both tiers' vector hits are ranked
    again, by their vectors, for one query vector moved towards the best matches of the merged
    text list (``episodes.stores.hot.Feedback``; docs/decisions/0017)."""

    def __init__(
        self,
        tenant: Tenant,
        query: SearchQuery,
        k: int,
        weights: RetrievalWeights,
        *,
        hot: bool,
        archive_layers: tuple[str, ...],
        missed: list[int],
        raw_turns: bool,
        layers_version: int | None = None,
    ):
        self.tenant, self.k, self.weights, self.hot = tenant, k, weights, hot
        #: Whether packed episodes are searched through their raw turns (the policy's
        #: ``search_packed_turns``).
        self.raw_turns = raw_turns
        # Warm and cold episodes, and the hot ones the index missed (by their shapes).
        self.archive_scopes = [query.scope.replace(layers=archive_layers)] if archive_layers else []
        if missed:
            self.archive_scopes.append(query.scope.replace(layers=(Layer.HOT,), episode_ids=tuple(missed)))
        self.scope = query.scope
        # The share of the tenant's turns in warm and cold, which weighs the tiers' text lists:
        # counted again once an episode has moved since (the tenant's ``layers_version``).
        self.packed_share = 0.0
        if self.archive_scopes and hot:
            total, packed = archive.turn_counts(tenant, layers_version)
            self.packed_share = packed / total if total else 0.0
        elif self.archive_scopes:
            self.packed_share = 1.0

    def fuse(self, vector: np.ndarray | None, text: str | None) -> Fusion:
        words = text or ""
        # At once: the hot tier's search in a worker thread (BM25, then KNN with the query moved
        # towards its best matches), the packed turns' vector candidates for the query as it came
        # on another (on its own connection, outside a transaction), and full text in Postgres here.
        # The packed vector statement is the longest of the three: it goes first.
        apart = vector is not None and bool(self.archive_scopes) and not connection.in_atomic_block
        pending = search_pool.submit(db.in_worker, self._candidates, vector) if apart else None
        hot = search_pool.submit(self._hot, vector, text) if self.hot and self.archive_scopes else None
        archive_text = [
            hit
            for scope in (self.archive_scopes if text is not None else [])
            for hit in archive.text_search(
                self.tenant, text=words, scope=scope, k=self.k, raw_turns=self.raw_turns
            )
        ]
        # While the other tiers are still answering: the vectors of the packed text matches the
        # query may be moved towards (``_moved``), the first ``docs`` of the packed list, since the
        # merged list's first ``docs`` packed matches are among them.
        docs = self.weights.feedback.docs
        packed_vectors = (
            archive.vectors_of(self.tenant, archive_text[:docs])
            if vector is not None and pending is not None and docs > 0
            else None
        )
        if pending is not None:
            candidates = pending.result()
        else:
            candidates = self._candidates(vector) if vector is not None and self.archive_scopes else []
        if hot is not None:
            hot_text, hot_vector, hot_found = hot.result()
        elif self.hot:
            hot_text, hot_vector, hot_found = self._hot(vector, text)  # no other tier: no hand-over
        else:
            hot_text, hot_vector, hot_found = [], [], {}
        text_list = interleaved([(hot_text, 1.0 - self.packed_share), (archive_text, self.packed_share)])
        if vector is None:
            return fuse([], text_list, self.weights)
        if not self.archive_scopes:
            return fuse(hot_vector, text_list, self.weights)
        # Both tiers compared with one vector: the query moved towards the best full-text matches
        # of either tier. The hot KNN found its turns with the query moved by its own matches; they
        # and the packed candidates are ranked again here, by their vectors.
        moved = self._moved(vector, text_list, hot_found, candidates, packed_vectors)
        both: list[Match] = [*hot_vector, *candidates]
        ranked = archive.rescored(both, moved, 2 * self.k)
        return fuse(ranked, text_list, self.weights)

    def _hot(
        self, vector: np.ndarray | None, text: str | None
    ) -> tuple[list[HotHit], list[HotHit], dict[str, np.ndarray]]:
        """The hot tier's (text hits, vector hits, the vectors of the text hits its query moved
        towards); its vector hits carry their vectors when a packed tier is searched too."""
        vector_hits, text_hits, found = hot_store().search(
            self.tenant.id.hex,
            vector=vector,
            text=text,
            scope=self.scope,
            k=self.k,
            feedback=self.weights.feedback,
            with_vectors=bool(self.archive_scopes),
        )
        return text_hits, vector_hits, found

    def _candidates(self, vector: np.ndarray) -> list[archive.ArchiveHit]:
        return [
            hit
            for scope in self.archive_scopes
            for hit in archive.vector_candidates(
                self.tenant, vector=vector, scope=scope, k=self.k, raw_turns=self.raw_turns
            )
        ]

    def _moved(
        self,
        vector: np.ndarray,
        text_list: list[Match],
        hot_found: dict[str, np.ndarray],
        candidates: list[archive.ArchiveHit],
        packed_vectors: dict[tuple[int, int | None], np.ndarray] | None = None,
    ) -> np.ndarray:
        feedback = self.weights.feedback
        best = text_list[: feedback.docs]
        if not best:
            return vector
        # The merged list's hot matches are among the hot tier's first ``docs`` text hits, whose
        # vectors its search read (those still there).
        found = [hot_found[m.doc_id] for m in best if isinstance(m, HotHit) and m.doc_id in hot_found]
        # A packed match's vector: from the candidates when it is one, else as read while the
        # other tiers answered (``packed_vectors``), else read now.
        known = {(c.episode_id, c.turn_id): c.vector for c in candidates if c.vector is not None}
        packed = [m for m in best if isinstance(m, archive.ArchiveHit)]
        if packed_vectors is None:
            packed_vectors = archive.vectors_of(
                self.tenant, [m for m in packed if (m.episode_id, m.turn_id) not in known]
            )
        known.update(packed_vectors)
        found += [known[(m.episode_id, m.turn_id)] for m in packed if (m.episode_id, m.turn_id) in known]
        return moved_towards(vector, found, feedback.weight)
