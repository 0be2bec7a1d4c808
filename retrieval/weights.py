"""A search's settings: its fusion weights (``ranking.RetrievalWeights``), the platform's
(``MEMORY``) and the tenant's policy on them, and how much an answer shows by default
(``evidence.Budget``)."""

from __future__ import annotations

import dataclasses

from episodes.stores.hot import Feedback
from lifecycle.tenant_policy import Policy
from memory_platform.conf import memory_settings

from .evidence import Budget
from .ranking import RetrievalWeights


def platform_weights() -> RetrievalWeights:
    """The platform's fusion settings (``MEMORY``), before any tenant's policy."""
    return RetrievalWeights(
        vector=float(memory_settings.RRF_VECTOR_WEIGHT),
        text=float(memory_settings.RRF_TEXT_WEIGHT),
        k=int(memory_settings.RRF_K),
        priority=float(memory_settings.SEARCH_PRIORITY_SHARE),
        candidates=int(memory_settings.SEARCH_CANDIDATES),
        feedback=Feedback(
            docs=int(memory_settings.SEARCH_FEEDBACK_DOCS),
            weight=float(memory_settings.SEARCH_FEEDBACK_WEIGHT),
        ),
        time=float(memory_settings.SEARCH_TIME_BOOST),
        hops=bool(memory_settings.SEARCH_HOPS),
        hop_weight=float(memory_settings.SEARCH_HOP_WEIGHT),
    )


def tenant_weights(policy: Policy) -> RetrievalWeights:
    """The fusion the tenant's policy sets (fusion weights and k) on the platform's settings."""
    return dataclasses.replace(
        platform_weights(), vector=policy.rrf_vector_weight, text=policy.rrf_text_weight, k=policy.rrf_k
    )


def default_budget() -> Budget:
    """How much an answer shows unless the caller says: the platform's settings."""
    return Budget(
        tokens=int(memory_settings.SEARCH_MAX_TOKENS),
        neighbours=int(memory_settings.SNIPPET_NEIGHBOURS),
    )
