"""Deleting a tenant for good (``manage.py delete_tenant``, the console's delete, the bench's cleanup).

Its memory goes from every store as an erasure takes it (``erasure.erase_tenant_data``: Redis
documents, index and counters, the Postgres rows, the task queue, then a verification pass), and
then the tenant row with what an erasure keeps (its policy and its changes, keys, operators,
tombstones). Its audit records stay, without their tenant, and one more says who deleted it, when,
and what went (``tenant_deleted``, whose detail holds the tenant's name and id).

Beside a running platform: the tenant is made inactive first (its keys stop working, the worker
starts no tick or snapshot of it) and its tick schedule removed; the deletion then holds the
tenant's tick lock, waiting for a tick that is running to finish, so the two never delete and
move the same rows at once; and each Postgres transaction is tried again when Postgres breaks a
deadlock with another writer (``erasure.in_transaction_retrying``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import DatabaseError, connection

from lifecycle.journal import to_json
from lifecycle.tasks import SCHEDULE_PREFIX
from lifecycle.tick import tick_lock
from memory_platform.tenancy.audit import TENANT_DELETED, audit_record, key_uses_erase, key_uses_held
from memory_platform.tenancy.models import AuditEvent, Tenant

from . import erasure

#: How long a deletion waits for a running tick of the tenant to finish.
TICK_WAIT_SECONDS = 600.0


class DeletionRefused(Exception):
    """The tenant could not be deleted now (a store is down, a tick still runs): nothing was."""


@dataclass
class Deletion:
    """What deleting a tenant removed, per store (counts only), and the audit record it left."""

    tenant: str
    tenant_id: str
    deleted_at: datetime
    erasure: erasure.Receipt
    with_tenant: dict[str, int] = field(default_factory=dict)
    audit_kept: int = 0
    audit_id: int | None = None
    #: The counts of its keys' uses (kept by an erasure of its data, not by a deletion): removed, left.
    key_uses: int = 0
    key_uses_left: bool = False

    @property
    def clean(self) -> bool:
        return self.erasure.clean and not self.key_uses_left

    def as_json(self) -> dict[str, Any]:
        removed = self.erasure.removed
        return {
            "tenant": self.tenant,
            "tenant_id": self.tenant_id,
            "deleted_at": to_json(self.deleted_at),
            "removed": {**removed, "tenant": self.with_tenant, "key_uses": self.key_uses},
            "verification": {**self.erasure.found_after, "key_uses": self.key_uses_left, "clean": self.clean},
            "audit": {"kept": self.audit_kept, "record": self.audit_id},
        }

    def lines(self) -> list[str]:
        """The receipt for a person: what went from each store, and what the check found."""
        removed = self.erasure.removed
        out = [f"deleted tenant {self.tenant} ({self.tenant_id}) at {to_json(self.deleted_at)}"]
        out.append("  postgres  " + _counts(removed.get("postgres", {})))
        redis = removed.get("redis", {})
        out.append(
            f"  redis     {redis.get('documents', 0)} hot documents, {redis.get('indexes', 0)} index(es), "
            f"{redis.get('counters', 0) + self.key_uses} counter set(s)"
        )
        queue = removed.get("queue", {})
        out.append(
            f"  queue     {queue.get('queued_tasks', 0)} queued task(s), {queue.get('task_results', 0)} task result(s)"
        )
        out.append("  tenant    " + _counts(self.with_tenant, all_=True))
        out.append(
            f"  audit     {self.audit_kept} record(s) kept, without their tenant; "
            f"this deletion is record {self.audit_id}"
        )
        found = self.erasure.left + int(self.key_uses_left)
        out.append("  check     clean: nothing of it is left" if self.clean else f"  check     {found} left")
        return out


def counted(label: str, n: int) -> str:
    """``n`` rows of the model ``label`` ("episodes.turn") in words: "1 turn", "3 turns"."""
    meta = apps.get_model(label)._meta
    return f"{n} {meta.verbose_name if n == 1 else meta.verbose_name_plural}"


def _counts(counts: dict[str, int], all_: bool = False) -> str:
    shown = [counted(label, n) for label, n in counts.items() if n or all_]
    return ", ".join(shown) or "nothing"


def _kept_tables() -> list[Any]:
    """The tenant's tables an erasure keeps and the tenant row takes with it (not the audit)."""
    audit = AuditEvent._meta.label_lower
    return [m for m in erasure.tenant_tables() if m._meta.label_lower in erasure.KEPT - {audit}]


def _unschedule(tenant: Tenant) -> None:
    from django_q.models import Schedule

    Schedule.objects.filter(name=f"{SCHEDULE_PREFIX}{tenant.pk}").delete()


def tenant_delete(
    *,
    tenant: Tenant,
    now: datetime,
    actor: str,
    tick_wait: float = TICK_WAIT_SECONDS,
    log: Callable[[str], None] | None = None,
) -> Deletion:
    """Delete ``tenant`` and everything it holds in every store; returns the receipt. Raises
    DeletionRefused (Redis down, or a tick of it still running after ``tick_wait`` seconds) with
    nothing deleted and the tenant as it was."""
    was_active = tenant.is_active
    Tenant.objects.filter(pk=tenant.pk).update(is_active=False)
    try:
        with tick_lock(tenant, wait=tick_wait) as held:
            if not held:
                raise DeletionRefused(
                    f"a tick of {tenant.name} is still running after {tick_wait:.0f} s; try again when it ends"
                )
            try:
                receipt = erasure.erase_tenant_data(tenant=tenant, now=now, actor=actor, log=log)
            except erasure.ErasureUnavailable as exc:
                raise DeletionRefused(str(exc)) from exc
            deletion = Deletion(tenant=tenant.name, tenant_id=str(tenant.pk), deleted_at=now, erasure=receipt)
            deletion.key_uses = key_uses_erase(tenant.pk)
            deletion.key_uses_left = key_uses_held(tenant.pk)

            def delete_row() -> None:
                deletion.with_tenant = {
                    m._meta.label_lower: m._default_manager.filter(tenant=tenant).count()
                    for m in _kept_tables()
                }
                record = audit_record(
                    tenant=tenant,
                    action=TENANT_DELETED,
                    actor=actor,
                    now=now,
                    name=tenant.name,
                    tenant_id=str(tenant.pk),
                    removed={
                        **receipt.removed,
                        "tenant": deletion.with_tenant,
                        "key_uses": deletion.key_uses,
                    },
                    clean=deletion.clean,
                )
                deletion.audit_id = record.pk
                deletion.audit_kept = AuditEvent.objects.filter(tenant=tenant).count()
                _unschedule(tenant)
                tenant.delete()  # the audit records stay, their tenant set to none

            erasure.in_transaction_retrying(delete_row, log=log)
    except BaseException:
        if was_active and Tenant.objects.filter(pk=tenant.pk).exists():
            Tenant.objects.filter(pk=tenant.pk).update(is_active=True)
        raise
    return deletion


def drop_tenant(tenant: Tenant, *, now: datetime, log: Callable[[str], None]) -> Deletion | None:
    """Delete a tenant a command made for itself (the bench's), telling ``log`` what went; when it
    cannot, say what is left and how to delete it later, and return None (the command's own
    results are not lost to a failed cleanup)."""
    try:
        try:
            deletion = tenant_delete(tenant=tenant, now=now, actor="cli", log=log)
        except DatabaseError:
            if connection.in_atomic_block:
                raise
            # A Ctrl-C in the middle of a statement can leave the connection half-way through its
            # protocol; the command is cleaning up after it, so once more on a new connection.
            connection.close()
            deletion = tenant_delete(tenant=tenant, now=now, actor="cli", log=log)
    except (DeletionRefused, DatabaseError) as exc:
        log(
            f"left tenant {tenant.name} in place ({str(exc).splitlines()[0]}): "
            f"`manage.py delete_tenant {tenant.name} --yes` deletes it"
        )
        return None
    removed = deletion.erasure.removed
    log(
        f"deleted tenant {tenant.name}: "
        + ", ".join(
            [counted(label, n) for label, n in removed.get("postgres", {}).items() if n]
            + [f"{removed.get('redis', {}).get('documents', 0)} hot documents"]
        )
    )
    return deletion
