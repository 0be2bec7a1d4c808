"""The ``MEMORY`` settings namespace: platform defaults, overridable in ``settings.MEMORY``.

Per-tenant tunables live in the tenant's policy once it exists; these are the defaults a policy
starts from and the limits that protect the service (in the style of DRF's ``api_settings``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

DEFAULTS: dict[str, Any] = {
    # embeddings
    "EMBEDDER": "local",
    "EMBEDDING_DIM": 384,
    "EMBED_BATCH_SIZE": 64,
    # a turn's window vector (the turn with two neighbours on each side): "embedded", the window's
    # text through the embedder (five turns of text for each turn's one); "derived", made from the
    # turns' own vectors, so each text goes through the embedder once
    # (docs/decisions/0055-ingest-at-the-embedders-speed.md)
    "WINDOW_VECTORS": "embedded",
    # the `openai` embedder (any OpenAI-compatible /embeddings server; its URL, model, key and
    # dimension are the tenant's): seconds per request, and how often a request that can succeed
    # later (unreachable, timed out, 429, 5xx) is tried again, after 0.5 s, 1 s, ...
    "OPENAI_EMBED_TIMEOUT": 10.0,
    "OPENAI_EMBED_RETRIES": 2,
    # input limits
    "MAX_TURN_CHARS": 32_000,
    "MAX_BATCH_TURNS": 500,
    # the text a batch embedded before its answer may hold (characters, all its turns together):
    # on 2 cores the local model reads about 50 kB a second, and a client that times out and tries
    # again would write the turns twice; larger batches go with "async": true (a worker embeds them)
    "MAX_SYNC_BATCH_CHARS": 500_000,
    "MAX_METADATA_BYTES": 16_384,
    "MAX_SCOPE_CHARS": 200,
    # rate limits (memory_platform.ratelimit), N/s or N/min: each API key (a tenant's `rate_limit`
    # overrides it), a tenant's keys together; failed logins (tenancy.login_throttle): invalid API
    # keys per client address, console logins per client address (or per device cookie), and
    # console logins per user name from every address together (docs/decisions/0036)
    "RATE_LIMIT": "100/s",
    "TENANT_RATE_LIMIT": "300/s",
    "AUTH_FAILURE_LIMIT": "20/min",
    "LOGIN_USER_FAILURE_LIMIT": "60/min",
    # The reverse proxies (addresses or CIDRs) whose X-Forwarded-For names the client
    # (memory_platform.client_address); none: the peer's address is the client's.
    "TRUSTED_PROXIES": (),
    # deepest nesting a request body may have (metadata included); deeper is a 400
    "MAX_JSON_DEPTH": 32,
    # An import's body (POST /api/v1/import); larger moves go through `manage.py import_tenant`.
    "MAX_IMPORT_BYTES": 64 * 1024 * 1024,
    # segmentation (docs/concepts.md#segmentation)
    "EPISODE_GAP_SECONDS": 30 * 60,
    "EPISODE_SPLIT_SIMILARITY": 0.10,
    "EPISODE_MAX_TURNS": 12,
    # retrieval: weighted RRF of the vector and full-text lists (the `fsrs` preset sets
    # 0.7/0.3 at k 60; these defaults rank better: docs/decisions/0026)
    "RRF_VECTOR_WEIGHT": 0.5,
    "RRF_TEXT_WEIGHT": 0.5,
    "RRF_K": 10,
    "SEARCH_CANDIDATES": 50,
    # how much the priority (docs/concepts.md#priority) moves a hit, as a share of its relevance (retrieval.ranking)
    "SEARCH_PRIORITY_SHARE": 0.15,
    # the hot KNN query moved towards the best BM25 hits (pseudo-relevance feedback); 0 docs: off
    "SEARCH_FEEDBACK_DOCS": 3,
    "SEARCH_FEEDBACK_WEIGHT": 0.5,
    # A query naming a day, month or year ("last May", "in 2022") lifts episodes of that time by up
    # to this multiple of their score, a loose one ("recently") by an eighth of it (episodes.when,
    # retrieval.ranking.time_factor; 0: off).
    "SEARCH_TIME_BOOST": 4.0,
    # One hop from a search's best three candidates (shared rare entities, links: retrieval.hops),
    # each episode reached at this share of its seed's relevance; a request's `hops` overrides.
    "SEARCH_HOPS": False,
    "SEARCH_HOP_WEIGHT": 0.5,
    "ACTIVATION_LIMIT": 3,
    # a search answer shows this many tokens of turns across its hits, chosen by each turn's own
    # relevance; a matched turn puts this many neighbours on each side forward (retrieval.evidence;
    # `depth=deep` shows whole episodes)
    "SEARCH_MAX_TOKENS": 750,
    "SNIPPET_NEIGHBOURS": 1,
    # the API's searches queue their usage counts; a background thread writes them this often
    "USAGE_FLUSH_SECONDS": 0.5,
    # hot index
    "HOT_INDEX_ALGORITHM": "FLAT",
    # Redis calls a request waits on (searches, rate limits) give up after this many seconds, and
    # each hot-tier query asks RediSearch to give up after HOT_QUERY_TIMEOUT_MS (the search then
    # answers from Postgres, degraded; memory_platform.redis_client)
    "REDIS_QUICK_TIMEOUT": 1.0,
    "HOT_QUERY_TIMEOUT_MS": 500,
    # a tenant's hot tier, in bytes of turn text and vectors (Episode.hot_bytes); a policy
    # overrides it. Over it, ingest sends the least recently used hot episodes to warm first.
    "HOT_QUOTA_BYTES": 64 * 1024 * 1024,
    "PURGE_GRACE_DAYS": 30,
    # Hourly snapshots of each tenant's figures (the console's charts) are kept this long.
    "SNAPSHOT_KEEP_DAYS": 90,
    # Counted figures wait in each process this long before they are written to Redis.
    "COUNTERS_FLUSH_SECONDS": 1.0,
}


class MemorySettings:
    def __init__(self, defaults: dict[str, Any]):
        self.defaults = defaults
        self._cache: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name not in self.defaults:
            raise AttributeError(f"unknown MEMORY setting {name!r}")
        if name not in self._cache:
            user = getattr(settings, "MEMORY", {})
            self._cache[name] = user.get(name, self.defaults[name])
        return self._cache[name]

    def reload(self) -> None:
        self._cache.clear()


memory_settings = MemorySettings(DEFAULTS)


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "MEMORY":
        memory_settings.reload()


setting_changed.connect(_reload)
