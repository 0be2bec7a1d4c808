"""The system of record: turns (verbatim), episodes (the unit of memory) and links
(docs/concepts.md#episodes-and-turns)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

from memory_platform.conf import DEFAULTS
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.scoping import (
    TenantForeignKey,
    TenantOwned,
    TenantScopedManager,
    TenantScopedQuerySet,
)

from . import public_ids, when
from .language import Language
from .layers import Layer, State

EMBEDDING_DIM = int(DEFAULTS["EMBEDDING_DIM"])


def public_id_field() -> models.CharField:
    """The id the API shows (``episodes.public_ids``); unique in its tenant, compared bytewise."""
    return models.CharField(
        max_length=public_ids.LENGTH, default=public_ids.new, editable=False, db_collation="C"
    )


def turn_hot_bytes(text: str) -> int:
    """What one turn adds to ``Episode.hot_bytes``: its text in UTF-8 and its float32 vector."""
    return len(text.encode()) + 4 * EMBEDDING_DIM


def validate_mention(value: str) -> None:
    try:
        when.mention_window(value)
    except ValueError:
        raise ValidationError(
            f"{value!r} is not a day (2023-03-16) or a span of days (2023-03-06/2023-03-12)"
        ) from None


def mentioned_field(help_text: str) -> ArrayField:
    """Days a text points at with a relative time phrase ("yesterday" said on 17 March: 16 March),
    as ``episodes.when.mention_text`` writes them; search counts them as times of their episode."""
    return ArrayField(
        models.CharField(max_length=when.MENTION_LENGTH, validators=[validate_mention]),
        default=list,
        blank=True,
        help_text=help_text,
    )


#: The most days an episode keeps of what its turns mention (the first ones).
MENTIONED_LIMIT = 200

#: The longest ``search_text`` kept (the text of the current layer's shape; hot: its turns).
SEARCH_TEXT_LIMIT = 200_000


class Role(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"
    MEMORY = "memory"


class LinkKind(models.TextChoices):
    CONTINUES = "continues"
    RELATED = "related"
    REFERENCES = "references"
    MERGED_INTO = "merged_into"
    #: From a newer memory to an older one of the same owner whose value it replaces ("we decided on
    #: Arroios" to "leaning towards Alfama"): the older one stays whole and ranks below it
    #: (docs/decisions/0044-updates-above-what-they-replace.md).
    SUPERSEDES = "supersedes"


class EpisodeQuerySet(TenantScopedQuerySet):
    def visible(self) -> EpisodeQuerySet:
        """What reads may return: everything but forgotten episodes."""
        return self.exclude(state=State.FORGOTTEN)


_PACKED = models.Q(layer__in=["warm", "cold"])


class Episode(TenantOwned):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="episodes")
    public_id = public_id_field()
    user_id = models.CharField(max_length=200, blank=True, default="")
    agent_id = models.CharField(max_length=200, blank=True, default="")
    session_id = models.CharField(max_length=200, blank=True, default="")
    kind = models.CharField(
        max_length=50,
        default="conversation",
        help_text="the event type the episode records; activation returns memories of one kind",
    )
    title = models.CharField(max_length=200, blank=True, default="")
    layer = models.CharField(max_length=4, choices=Layer.choices, default=Layer.HOT)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    anchor = models.BooleanField(
        default=False,
        help_text="pinned: never decays, never goes cold (docs/concepts.md#anchors-pinned-memories)",
    )
    tags = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)

    first_occurred_at = models.DateTimeField()
    last_occurred_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    turn_count = models.PositiveIntegerField(default=0)

    # usage: what the activity score and FSRS read (docs/concepts.md#scores)
    access_count = models.PositiveIntegerField(default=0)
    traverse_count = models.PositiveIntegerField(default=0)
    last_accessed_at = models.DateTimeField()
    last_linked_at = models.DateTimeField(null=True, blank=True)
    stability = models.FloatField(null=True, blank=True, help_text="FSRS-6 stability S (days)")
    difficulty = models.FloatField(null=True, blank=True, help_text="FSRS-6 difficulty D")
    last_review_at = models.DateTimeField(null=True, blank=True)

    # content by layer: entities and decisions are kept verbatim in every layer (docs/concepts.md#layers)
    entities = ArrayField(models.CharField(max_length=300), default=list, blank=True)
    decisions = ArrayField(models.TextField(), default=list, blank=True)
    summary = models.TextField(blank=True, default="")
    key_points = ArrayField(models.TextField(), default=list, blank=True)
    headline = models.CharField(max_length=200, blank=True, default="")
    keywords = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    mentioned = mentioned_field("the days its turns' relative time phrases point at (their ``mentioned``)")
    restored_at = models.DateTimeField(
        null=True, blank=True, help_text="when it was last unpacked back to hot"
    )

    # search
    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    search_text = models.TextField(
        blank=True,
        default="",
        help_text="the text of the current layer's shape, as full text reads it (``language.index_text``)",
    )
    # Computed from search_text (``to_tsvector`` in ``TEXT_CONFIG``) by the trigger
    # episode_search_vector on every insert and every write of search_text: whatever Django sends
    # for it is replaced. A trigger rather than a generated column, so that a change of the
    # analysis re-indexes without rewriting the table under a lock (migration 0017).
    search_vector = SearchVectorField(
        null=True, editable=False, help_text="computed from search_text by the trigger episode_search_vector"
    )
    needs_reindex = models.BooleanField(default=False, help_text="the hot index missed a write (Redis down)")

    raw_chars = models.PositiveIntegerField(default=0)
    hot_bytes = models.PositiveBigIntegerField(
        default=0,
        help_text="what its turns weigh in the hot index: UTF-8 bytes of their text plus their vectors "
        "(the tenant's hot quota counts this)",
    )
    packed_chars = models.PositiveIntegerField(default=0)
    version = models.PositiveIntegerField(
        default=1,
        help_text="bumped by every touch; a layer move writes only at the version it read (halt on touch)",
    )
    forgotten_at = models.DateTimeField(null=True, blank=True)
    state_before_forget = models.CharField(max_length=16, blank=True, default="")

    objects = EpisodeQuerySet.as_manager()

    class Meta:
        ordering = ("-last_occurred_at", "-id")
        indexes = [
            # Usage counters (access_count, last_accessed_at, version) are in no index, so the
            # update after each search can be a heap-only one (no index writes; see 0007).
            models.Index(fields=["tenant", "layer"], name="episode_tenant_layer"),
            models.Index(fields=["tenant", "session_id"], name="episode_tenant_session"),
            models.Index(fields=["tenant", "kind"], name="episode_tenant_kind"),
            models.Index(fields=["tenant", "state"], name="episode_tenant_state"),
            # Normal search reads Postgres for warm and cold only, through the partial indexes
            # below, so a tenant's hot rows never crowd a warm/cold scan and hot writes skip the
            # HNSW graph. Degraded mode (Redis down) ranks hot rows exactly: the hot tier is
            # bounded by the tenant's quota, so that is a bounded scan.
            GinIndex(fields=["search_vector"], name="episode_search_vector"),
            # No pending list for what every search reads (migration 0010).
            GinIndex(
                fields=["search_vector"],
                name="episode_packed_search_vector",
                condition=_PACKED,
                fastupdate=False,
            ),
            # Search's one hop through a shared entity (retrieval.hops); no pending list, as it is
            # read by searches.
            GinIndex(fields=["entities"], name="episode_entities", fastupdate=False),
            # What the index repair drains and search checks for staleness: few rows, often none.
            models.Index(
                fields=["tenant"], name="episode_needs_reindex", condition=models.Q(needs_reindex=True)
            ),
            HnswIndex(
                name="episode_packed_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
                condition=_PACKED,
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(anchor=True, layer=Layer.COLD), name="episode_anchor_never_cold"
            ),
            models.CheckConstraint(
                condition=models.Q(last_occurred_at__gte=models.F("first_occurred_at")),
                name="episode_occurred_ordered",
            ),
            models.UniqueConstraint(fields=["tenant", "public_id"], name="episode_tenant_public_id"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.title or self.kind}"


class Turn(TenantOwned):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="turns")
    episode = TenantForeignKey(Episode, on_delete=models.CASCADE, related_name="turns")
    public_id = public_id_field()
    user_id = models.CharField(max_length=200, blank=True, default="")
    agent_id = models.CharField(max_length=200, blank=True, default="")
    session_id = models.CharField(max_length=200, blank=True, default="")
    seq = models.PositiveIntegerField(help_text="position in its session")
    role = models.CharField(max_length=10, choices=Role.choices)
    text = models.TextField()
    occurred_at = models.DateTimeField(help_text="when it was said (event time)")
    ingested_at = models.DateTimeField(default=timezone.now, help_text="when the platform received it")
    metadata = models.JSONField(default=dict, blank=True)
    mentioned = mentioned_field("the days its relative time phrases point at, read against occurred_at")
    language = models.CharField(
        max_length=2,
        choices=Language.choices,
        default=Language.ENGLISH,
        help_text="the caller's, the tenant policy's, or read off the text (``episodes.language``)",
    )
    #: The text as full text reads it when that differs from ``text`` (Chinese segmented into
    #: words: ``language.index_text``); NULL otherwise. Packed turns' ``window_vector`` reads it.
    index_text = models.TextField(null=True, blank=True, editable=False)
    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    context_embedding = VectorField(
        dimensions=EMBEDDING_DIM,
        null=True,
        blank=True,
        help_text="embedding of the turn with its neighbours in the episode; NULL when stale",
    )

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ("episode_id", "seq", "id")
        indexes = [
            models.Index(fields=["tenant", "session_id", "seq"], name="turn_tenant_session_seq"),
            models.Index(fields=["episode", "seq"], name="turn_episode_seq"),
            # The turns of warm and cold episodes are searched through partial HNSW and GIN
            # indexes on a `packed` column that triggers keep equal to the episode's layer
            # (migration 0008); the column is not on the model, so Django never writes it. The GIN
            # index keeps no pending list (migration 0010).
        ]
        constraints = [models.UniqueConstraint(fields=["tenant", "public_id"], name="turn_tenant_public_id")]

    def __str__(self) -> str:
        return f"{self.role}: {self.text[:60]}"


class Link(TenantOwned):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="links")
    src = TenantForeignKey(Episode, on_delete=models.CASCADE, related_name="out_links")
    dst = TenantForeignKey(Episode, on_delete=models.CASCADE, related_name="in_links")
    kind = models.CharField(max_length=12, choices=LinkKind.choices, default=LinkKind.RELATED)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "src", "dst", "kind"], name="link_unique_per_tenant"),
            models.CheckConstraint(condition=~models.Q(src=models.F("dst")), name="link_not_self"),
        ]
        indexes = [models.Index(fields=["tenant", "dst"], name="link_tenant_dst")]

    def __str__(self) -> str:
        return f"{self.src_id} -{self.kind}-> {self.dst_id}"


class ForgottenUser(TenantOwned):
    """A person erased from a tenant for good (``rights.erasure.forget_user``): the tombstone that
    keeps a retried or queued write from bringing them back. It keeps a hash of the ``user_id``, not
    the id; an operator who deletes it lets the id write again."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="forgotten_users")
    user_hash = models.CharField(max_length=64, editable=False)
    forgotten_at = models.DateTimeField()

    objects = TenantScopedManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user_hash"], name="forgotten_user_once_per_tenant")
        ]

    def __str__(self) -> str:
        return f"user {self.user_hash[:12]}… forgotten at {self.forgotten_at:%Y-%m-%d %H:%M}"

    @staticmethod
    def hash(tenant_id: object, user_id: str) -> str:
        return hashlib.sha256(f"{tenant_id}|{user_id}".encode()).hexdigest()

    @classmethod
    def among(cls, tenant: Tenant, user_ids: Iterable[str | None]) -> list[str]:
        """Those of ``user_ids`` the tenant has forgotten for good (one statement; none for "")."""
        hashes = {cls.hash(tenant.pk, u): u for u in {u for u in user_ids if u}}
        if not hashes:
            return []
        found = cls.objects.filter(tenant=tenant, user_hash__in=list(hashes)).values_list(
            "user_hash", flat=True
        )
        return sorted(hashes[h] for h in found)
