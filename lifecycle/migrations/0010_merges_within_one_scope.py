"""Withdraw the open merge proposals whose two memories belong to different users or agents: the
tick proposed them before merges stayed within one owner
(docs/decisions/0040-merges-within-one-scope.md). Each is rejected by "migration" with a note
and journaled as the journal module writes (``lifecycle.journal.journal_record``), so the console
can roll one back. The reverse opens again the proposals this withdrew (found by
``decided_by="migration"``) and marks their journal entries rolled back."""

from django.db import migrations
from django.db.models import F, Q
from django.utils import timezone

#: ``episodes.stores.merges.MERGE_SCOPE`` as it is when this is written (a migration keeps its own).
SCOPE = ("user_id", "agent_id")
ACTOR = "migration"
ACTION = "withdraw_candidate"
NOTE = (
    "withdrawn: its two memories belong to different users or agents, and a merge stays within one "
    "(docs/decisions/0040-merges-within-one-scope.md)"
)


def withdraw_crossing_merges(apps, schema_editor, now=None):
    """``now`` is the migration's clock unless a caller gives one."""
    Candidate = apps.get_model("lifecycle", "Candidate")
    JournalEntry = apps.get_model("lifecycle", "JournalEntry")
    now = now or timezone.now()
    crossing = Q()
    for name in SCOPE:
        crossing |= ~Q(**{f"episode__{name}": F(f"other__{name}")})
    pending = Candidate._base_manager.filter(kind="merge", status="proposed").filter(crossing)
    for candidate in pending.select_related("episode", "other").order_by("pk"):
        candidate.status = "rejected"
        candidate.decided_at = now
        candidate.decided_by = ACTOR
        candidate.note = NOTE
        candidate.save(update_fields=["status", "decided_at", "decided_by", "note"])
        JournalEntry._base_manager.create(
            tenant_id=candidate.tenant_id,
            created_at=now,
            action=ACTION,
            actor=ACTOR,
            episode_id=candidate.episode_id,
            episode_id_value=candidate.episode_id,
            before={},
            after={
                "candidate_id": candidate.pk,
                "kind": "merge",
                "other": candidate.other_id,
                "owners": [
                    [getattr(e, name) for name in SCOPE] for e in (candidate.episode, candidate.other)
                ],
            },
        )


def reopen_withdrawn_merges(apps, schema_editor, now=None):
    Candidate = apps.get_model("lifecycle", "Candidate")
    JournalEntry = apps.get_model("lifecycle", "JournalEntry")
    withdrawn = Candidate._base_manager.filter(kind="merge", status="rejected", decided_by=ACTOR)
    ids = list(withdrawn.values_list("pk", flat=True))
    withdrawn.update(status="proposed", decided_at=None, decided_by="", note="")
    JournalEntry._base_manager.filter(
        action=ACTION, actor=ACTOR, after__candidate_id__in=ids, rolled_back_at__isnull=True
    ).update(rolled_back_at=now or timezone.now())


class Migration(migrations.Migration):
    dependencies = [("lifecycle", "0009_policy_hot_pinned_share")]

    operations = [migrations.RunPython(withdraw_crossing_merges, reopen_withdrawn_merges, elidable=True)]
