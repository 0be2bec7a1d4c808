"""The lifecycle's models: the tenant's policy (``lifecycle.policy``) and the records of what the
lifecycle did (docs/concepts.md#the-tick): tick runs, journal entries, candidates, access windows."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from episodes.models import public_id_field
from memory_platform.tenancy.models import Tenant
from memory_platform.tenancy.scoping import (
    TenantForeignKey,
    TenantOwned,
    TenantScopedManager,
)

from .policy import (
    LayerRule,
    MemoryPolicy,
    Preset,
    SummariserName,
    default_fsrs_parameters,
    fsrs_parameters_error,
    setting_default,
    validate_base_url,
)
from .policy_rows import policy_row, read_policy

__all__ = [
    "AccessWindow",
    "Candidate",
    "JournalEntry",
    "LayerRule",
    "MemoryPolicy",
    "Preset",
    "SummariserName",
    "TickRun",
    "default_fsrs_parameters",
    "policy_row",
    "fsrs_parameters_error",
    "read_policy",
    "setting_default",
    "validate_base_url",
]


class TickRun(TenantOwned):
    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED = "skipped"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tick_runs")
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    now_used = models.DateTimeField(help_text="the `now` the tick computed with (time is an input)")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    counts = models.JSONField(default=dict, blank=True, help_text="episodes moved per step")
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)

    objects = TenantScopedManager()

    class Meta:
        ordering = ("-started_at", "-id")
        indexes = [models.Index(fields=["tenant", "-started_at"], name="tickrun_tenant_started")]

    def __str__(self) -> str:
        return f"tick {self.pk} {self.status} at {self.now_used:%Y-%m-%d %H:%M}"


class JournalEntry(TenantOwned):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="journal_entries")
    created_at = models.DateTimeField(default=timezone.now)
    action = models.CharField(max_length=50, help_text="e.g. demote_warm, mark_delete_candidate, forget")
    actor = models.CharField(max_length=100, blank=True, default="", help_text="tick, admin:<user>, api")
    # The id is copied so the entry still names the episode after a purge nulls the foreign key.
    episode = TenantForeignKey(
        "episodes.Episode", null=True, blank=True, on_delete=models.SET_NULL, related_name="journal_entries"
    )
    episode_id_value = models.BigIntegerField(null=True, blank=True)
    before = models.JSONField(default=dict, blank=True, help_text="enough of the old state to undo")
    after = models.JSONField(default=dict, blank=True)
    tick_run = TenantForeignKey(
        TickRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="journal_entries"
    )
    rolled_back_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedManager()

    class Meta:
        ordering = ("-created_at", "-id")
        verbose_name_plural = "journal entries"
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="journal_tenant_created"),
            models.Index(fields=["tenant", "episode_id_value"], name="journal_tenant_episode"),
        ]

    def __str__(self) -> str:
        return f"{self.action} #{self.episode_id_value} at {self.created_at:%Y-%m-%d %H:%M}"


class Candidate(TenantOwned):
    """A merge or delete proposal (docs/concepts.md#candidates-merges-and-deletes). A tick only proposes; an
    operator or the tenant decides, and even then the change is soft and journaled
    (docs/concepts.md#journal-and-rollback)."""

    class Kind(models.TextChoices):
        MERGE = "merge"
        DELETE = "delete"

    class Status(models.TextChoices):
        PROPOSED = "proposed"
        APPROVED = "approved"
        REJECTED = "rejected"
        APPLIED = "applied"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="candidates")
    #: What the API calls the proposal (``episodes.public_ids``): its integer key counts every
    #: tenant's proposals.
    public_id = public_id_field()
    kind = models.CharField(max_length=6, choices=Kind.choices)
    episode = TenantForeignKey(
        "episodes.Episode",
        on_delete=models.CASCADE,
        related_name="candidacies",
        help_text="the episode to delete, or to merge into `other`",
    )
    other = TenantForeignKey(
        "episodes.Episode",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="merge_targets",
        help_text="merge only: the episode that survives",
    )
    similarity = models.FloatField(null=True, blank=True, help_text="merge only: embedding cosine")
    score = models.FloatField(help_text="the activity score when proposed; never used again")
    episode_version = models.IntegerField(
        null=True,
        blank=True,
        help_text="the memory's version when proposed: approving it after the memory changed (a use, a pin, "
        "a restore, an edit) is refused",
    )
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PROPOSED)
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=100, blank=True, default="")
    note = models.CharField(max_length=300, blank=True, default="")

    objects = TenantScopedManager()

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = [models.Index(fields=["tenant", "status", "kind"], name="candidate_tenant_status")]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "public_id"], name="candidate_tenant_public_id"),
            # One open proposal per (kind, episode, other): a tick run twice proposes nothing new.
            models.UniqueConstraint(
                fields=["tenant", "kind", "episode", "other"],
                condition=Q(status="proposed"),
                nulls_distinct=False,
                name="candidate_one_open_proposal",
            ),
            models.CheckConstraint(
                condition=(Q(kind="merge") & Q(other__isnull=False) & ~Q(other=F("episode")))
                | (Q(kind="delete") & Q(other__isnull=True)),
                name="candidate_kind_shape",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["proposed", "approved", "rejected", "applied"]),
                name="candidate_status_known",
            ),
        ]

    def __str__(self) -> str:
        target = f" -> #{self.other_id}" if self.other_id else ""
        return f"{self.kind} #{self.episode_id}{target} ({self.status})"


class AccessWindow(TenantOwned):
    """The usage count a packed episode had when its current window of `hot_days` began.

    Upward migration (the tick's promote step) needs "accesses within hot_days"; the episode keeps only a
    running count, so the tick keeps the count at the start of a window and slides it forward while
    the episode is not used.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="access_windows")
    #: One per episode (the constraint, which holds the tenant as Citus requires: docs/decisions/0053).
    episode = TenantForeignKey("episodes.Episode", on_delete=models.CASCADE, related_name="access_window")
    started_at = models.DateTimeField()
    access_count_at_start = models.PositiveIntegerField()

    objects = TenantScopedManager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "episode"], name="access_window_once_per_episode")
        ]

    def __str__(self) -> str:
        return f"#{self.episode_id} since {self.started_at:%Y-%m-%d} from {self.access_count_at_start}"


class TenantSnapshot(TenantOwned):
    """A tenant's figures (``lifecycle.stats.tenant_stats``) at one moment: written every hour by a
    scheduled task and kept ``MEMORY["SNAPSHOT_KEEP_DAYS"]`` days; the console's charts read them."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="snapshots")
    taken_at = models.DateTimeField()
    data = models.JSONField()

    objects = TenantScopedManager()

    class Meta:
        ordering = ("-taken_at", "-id")
        indexes = [models.Index(fields=["tenant", "-taken_at"], name="snapshot_tenant_taken")]

    def __str__(self) -> str:
        return f"{self.tenant_id} at {self.taken_at:%Y-%m-%d %H:%M}"


class PolicyChange(TenantOwned):
    """A saved change of a tenant's policy: who, when, which fields, their old and new values
    (``lifecycle.services.policy_save``; secrets only as set or empty)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="policy_changes")
    changed_at = models.DateTimeField()
    actor = models.CharField(max_length=100, help_text="admin:<user>, api:<key prefix>, preset")
    changes = models.JSONField(help_text="{field: [old, new]}")

    objects = TenantScopedManager()

    class Meta:
        ordering = ("-changed_at", "-id")
        indexes = [models.Index(fields=["tenant", "-changed_at"], name="policychange_tenant_changed")]

    def __str__(self) -> str:
        return f"{', '.join(self.changes)} by {self.actor} at {self.changed_at:%Y-%m-%d %H:%M}"
