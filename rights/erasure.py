"""Erasure for good (docs/decisions/0030-data-rights.md): a tenant's whole memory, or one person's inside a
tenant.

Soft forgetting (``forgetting``) is the everyday way and rolls back; this is the other one, asked
for on purpose in two calls: the first names what would go and hands out a confirmation token
(``erasure_token``) and changes nothing; the second, with that token, removes everything of it from
every store:

- Redis first: the hot documents (and for a tenant its index and counters), so nothing searchable
  outlives its rows; with Redis down nothing is erased at all (``ErasureUnavailable``);
- Postgres, in one transaction: episodes, turns, links, candidates, access windows, tick runs,
  snapshots and the journal entries, whose before-states hold old text (tried again when Postgres
  breaks a deadlock with a concurrent writer by rolling it back: ``in_transaction_retrying``);
- the task queue: queued tasks and task results that name the tenant (or the person's episodes).

Then a verification pass looks again in every store, every table with a tenant column included
(``tenant_tables``), and the receipt lists what was removed and what the pass found. Erasing a
person leaves a tombstone (``ForgottenUser``) so a retried or queued write cannot bring them back.
The tenant, its policy, its keys, its operators and its audit stay.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, TypedDict, TypeVar

import redis
from django.apps import apps
from django.core import signing
from django.db import OperationalError, models, transaction
from redis.commands.search.query import Query
from typing_extensions import Doc

from episodes.models import Episode, ForgottenUser, Link, Turn
from episodes.stores import keys
from episodes.stores.hot import HotUnavailable, hot_store
from lifecycle.journal import to_json
from lifecycle.models import AccessWindow, Candidate, JournalEntry, TenantSnapshot, TickRun
from memory_platform import counters
from memory_platform.tenancy.audit import ERASURE, FORGET_USER, audit_record
from memory_platform.tenancy.models import Tenant

#: What ``erasure_token`` confirms: the tenant's memory, or ``user:<id>``.
TENANT_DATA = "tenant-data"
#: How long a confirmation token is good for.
TOKEN_TTL = timedelta(minutes=15)
_SALT = "memory-platform.erasure"

#: What an erasure removes, children first, so each delete is one statement.
ERASED = (JournalEntry, Candidate, AccessWindow, Link, Turn, Episode, TickRun, TenantSnapshot)
#: Tables with a tenant column that an erasure of the tenant's memory keeps: who it is and how it
#: is run (policy, keys, operators, their records), and the tombstones.
KEPT = frozenset(
    {
        "lifecycle.memorypolicy",
        "lifecycle.policychange",
        "tenancy.apikey",
        "tenancy.tenantoperator",
        "tenancy.auditevent",
        "episodes.forgottenuser",
    }
)


T = TypeVar("T")
#: Postgres's codes for a transaction it rolled back to break a deadlock or a serialization conflict.
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
ATTEMPTS = 6


class ErasureRefused(Exception):
    """The confirmation token is missing, wrong or old: nothing was erased."""


class ErasureUnavailable(Exception):
    """A store could not be reached before anything was erased: nothing was."""


def tenant_tables() -> list[type[models.Model]]:
    """Every model with a ``tenant`` foreign key (a new one is covered without a change here)."""
    return [
        model
        for model in apps.get_models()
        if any(f.name == "tenant" and f.is_relation and f.related_model is Tenant for f in model._meta.fields)
    ]


def _label(model: type[models.Model]) -> str:
    return model._meta.label_lower


def in_transaction_retrying(
    fn: Callable[[], T],
    *,
    attempts: int = ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] | None = None,
) -> T:
    """``fn`` in one transaction, run again (after 0.5, 1, 2... s) when Postgres rolled it back to
    break a deadlock with a concurrent writer (the worker's tasks, a write in flight): each attempt
    is whole or nothing. Any other error, or the last attempt's, is raised."""
    for attempt in range(attempts):
        try:
            with transaction.atomic():
                return fn()
        except OperationalError as exc:
            if attempt == attempts - 1 or getattr(exc.__cause__, "sqlstate", None) not in RETRYABLE_SQLSTATES:
                raise
            wait = 0.5 * 2**attempt
            if log is not None:
                log(f"{str(exc).splitlines()[0]}; trying again in {wait} s")
            sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover


# --- the confirmation --------------------------------------------------------------------------------
def erasure_token(*, tenant: Tenant, what: str, now: datetime) -> str:
    """A token that confirms erasing ``what`` ("tenant-data" or "user:<id>") of ``tenant``."""
    return signing.dumps({"tenant": tenant.pk.hex, "what": what, "at": now.timestamp()}, salt=_SALT)


def check_token(*, tenant: Tenant, what: str, token: object, now: datetime) -> None:
    if not isinstance(token, str) or not token:
        raise ErasureRefused("send back the 'confirm' token the first call answered")
    try:
        claim = signing.loads(token, salt=_SALT)
    except signing.BadSignature:
        raise ErasureRefused("this confirmation token is not one this platform gave") from None
    if claim.get("tenant") != tenant.pk.hex or claim.get("what") != what:
        raise ErasureRefused("this confirmation token was given for another erasure")
    if now.timestamp() - float(claim.get("at", 0)) > TOKEN_TTL.total_seconds():
        raise ErasureRefused(f"this confirmation token is older than {TOKEN_TTL}; ask for a new one")


# --- what there is ----------------------------------------------------------------------------------
def tenant_holdings(tenant: Tenant) -> dict[str, int]:
    """What an erasure of the tenant's memory would remove from Postgres, per table."""
    return {
        _label(m): m._default_manager.filter(tenant=tenant).count()
        for m in tenant_tables()
        if _label(m) not in KEPT
    }


def user_holdings(tenant: Tenant, user_id: str) -> dict[str, int]:
    ids = list(Episode.objects.filter(tenant=tenant, user_id=user_id).values_list("pk", flat=True))
    return {
        "episodes": len(ids),
        "turns": Turn.objects.filter(tenant=tenant, user_id=user_id).count(),
        "journal_entries": _journal_of(tenant, ids).count(),
    }


def _journal_of(tenant: Tenant, episode_ids: list[int]) -> models.QuerySet[JournalEntry]:
    return JournalEntry.objects.filter(tenant=tenant).filter(
        models.Q(episode_id__in=episode_ids) | models.Q(episode_id_value__in=episode_ids)
    )


# --- the task queue ---------------------------------------------------------------------------------
def _names(value: Any, wanted: set[str]) -> bool:
    if isinstance(value, dict):
        return any(_names(v, wanted) for v in value.values())
    if isinstance(value, list | tuple | set):
        return any(_names(v, wanted) for v in value)
    return str(value) in wanted


def _queued(tenant: Tenant, episode_ids: Iterable[int] | None) -> tuple[list[Any], list[Any]]:
    """Queued tasks and task results whose arguments name the tenant (and, when ``episode_ids`` is
    given, one of those episodes)."""
    from django_q.models import OrmQ, Task

    tenant_names = {str(tenant.pk), tenant.pk.hex}
    episodes = {str(i) for i in episode_ids} if episode_ids is not None else None

    def hit(args: Any, kwargs: Any) -> bool:
        if not _names([args, kwargs], tenant_names):
            return False
        return episodes is None or _names(args, episodes)

    queued = [row for row in OrmQ.objects.all() if hit(row.task.get("args"), row.task.get("kwargs"))]
    results = [row for row in Task.objects.all() if hit(row.args, row.kwargs)]
    return queued, results


def _unqueue(tenant: Tenant, episode_ids: Iterable[int] | None) -> dict[str, int]:
    from django_q.models import OrmQ, Task

    queued, results = _queued(tenant, episode_ids)
    OrmQ.objects.filter(pk__in=[row.pk for row in queued]).delete()
    Task.objects.filter(pk__in=[row.pk for row in results]).delete()
    return _queue_counts(queued, results)


def _queue_counts(queued: list[Any], results: list[Any]) -> dict[str, int]:
    return {"queued_tasks": len(queued), "task_results": len(results)}


# --- the receipt ------------------------------------------------------------------------------------
class ByStore(TypedDict):
    """Counts per store: Postgres per table, Redis documents (and indexes, counters), queued tasks."""

    postgres: dict[str, int]
    redis: dict[str, int]
    queue: dict[str, int]


class Verification(ByStore):
    """What a pass after the erasure still found, per store (nothing when ``clean``)."""

    clean: bool


class ErasureReceipt(TypedDict):
    """An erasure's receipt (the answer's status is 503 when the verification is not clean)."""

    erased: Annotated[str, Doc("tenant_data or user")]
    erased_at: str
    removed: ByStore
    verification: Verification


class ErasureConfirm(TypedDict):
    """An erasure's first call: the token the second one sends back, and what would go."""

    confirm: str
    expires_in_seconds: int
    will_erase: Annotated[dict[str, int], Doc("what there is now, per table or kind of record")]


@dataclass
class Receipt:
    erased: str
    erased_at: datetime
    removed: ByStore = field(default_factory=lambda: ByStore(postgres={}, redis={}, queue={}))
    found_after: ByStore = field(default_factory=lambda: ByStore(postgres={}, redis={}, queue={}))

    @property
    def left(self) -> int:
        """What the verification found, in every store."""
        found = self.found_after
        return sum(n for store in (found["postgres"], found["redis"], found["queue"]) for n in store.values())

    @property
    def clean(self) -> bool:
        return not self.left

    def as_json(self) -> ErasureReceipt:
        return {
            "erased": self.erased,
            "erased_at": to_json(self.erased_at),
            "removed": self.removed,
            "verification": {**self.found_after, "clean": self.clean},
        }


def _hot_counts(tenant: Tenant) -> dict[str, int]:
    client = hot_store().client
    return {
        "keys": sum(1 for _ in client.scan_iter(match=keys.tenant_pattern(tenant.pk.hex), count=1000)),
        "indexes": _hot_indexes(tenant),
        "counters": int(client.exists(counters.key_of(tenant.pk))),
    }


def _hot_indexes(tenant: Tenant) -> int:
    hex_ = tenant.pk.hex
    return sum(1 for name in hot_store().client.execute_command("FT._LIST") if hex_ in _text(name))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- a tenant's memory ------------------------------------------------------------------------------
def erase_tenant_data(
    *, tenant: Tenant, now: datetime, actor: str, log: Callable[[str], None] | None = None
) -> Receipt:
    """Remove the tenant's memory from every store for good; the receipt says what went and what
    the verification pass found. Raises ErasureUnavailable (Redis down) before removing anything.
    ``log`` hears of a transaction tried again."""
    receipt = Receipt(erased=TENANT_DATA, erased_at=now)
    store = hot_store()
    try:
        indexes = _hot_indexes(tenant)
        documents = store.drop_tenant(tenant.pk.hex)
        erased_counters = counters.erase(tenant.pk)
    except HotUnavailable as exc:
        raise ErasureUnavailable(f"Redis is unavailable, so nothing was erased: {exc}") from exc

    def remove_rows() -> tuple[dict[str, int], dict[str, int]]:
        postgres = {_label(m): m.objects.filter(tenant=tenant).delete()[0] for m in ERASED}
        return postgres, _unqueue(tenant, None)

    postgres, queue = in_transaction_retrying(remove_rows, log=log)
    # A write that was in flight may have indexed a document meanwhile: once more, now the rows are gone.
    documents += store.drop_tenant(tenant.pk.hex)
    receipt.removed = {
        "postgres": postgres,
        "redis": {"documents": documents, "indexes": indexes, "counters": erased_counters},
        "queue": queue,
    }
    receipt.found_after = {
        "postgres": tenant_holdings(tenant),
        "redis": _hot_counts(tenant),
        "queue": _queue_counts(*_queued(tenant, None)),
    }
    audit_record(tenant=tenant, action=ERASURE, actor=actor, now=now, **_audit_detail(receipt))
    return receipt


# --- one person's memory ----------------------------------------------------------------------------
def forget_user(*, tenant: Tenant, user_id: str, now: datetime, actor: str) -> Receipt:
    """Remove everything the tenant holds of ``user_id`` for good, and keep them from coming back
    (a tombstone). Other users of the tenant are not touched."""
    if not user_id:
        raise ValueError("a user_id is needed")
    receipt = Receipt(erased="user", erased_at=now)
    episode_ids = list(Episode.objects.filter(tenant=tenant, user_id=user_id).values_list("pk", flat=True))
    turn_ids = list(
        Turn.objects.filter(tenant=tenant)
        .filter(models.Q(user_id=user_id) | models.Q(episode_id__in=episode_ids))
        .values_list("pk", flat=True)
    )
    hex_ = tenant.pk.hex
    doc_keys = [keys.episode_key(hex_, i) for i in episode_ids] + [keys.turn_key(hex_, i) for i in turn_ids]
    try:
        documents = _unlink(doc_keys) + _unlink(_user_documents(tenant, user_id))
    except HotUnavailable as exc:
        raise ErasureUnavailable(f"Redis is unavailable, so nothing was erased: {exc}") from exc
    with transaction.atomic():
        ForgottenUser.objects.get_or_create(
            tenant=tenant, user_hash=ForgottenUser.hash(tenant.pk, user_id), defaults={"forgotten_at": now}
        )
        postgres = {
            "lifecycle.journalentry": _journal_of(tenant, episode_ids).delete()[0],
            "episodes.turn": Turn.objects.filter(tenant=tenant, pk__in=turn_ids).delete()[0],
        }
        # Links, candidates and access windows go with their episodes (foreign keys, cascading).
        _, per_model = Episode.objects.filter(tenant=tenant, pk__in=episode_ids).delete()
        postgres.update({k.lower(): v for k, v in per_model.items() if k.lower() not in postgres})
        queue = _unqueue(tenant, episode_ids)
    documents += _unlink(_user_documents(tenant, user_id))
    receipt.removed = {"postgres": postgres, "redis": {"documents": documents}, "queue": queue}
    client = hot_store().client
    receipt.found_after = {
        "postgres": {
            "episodes.episode": Episode.objects.filter(tenant=tenant, user_id=user_id).count(),
            "episodes.turn": Turn.objects.filter(tenant=tenant)
            .filter(models.Q(user_id=user_id) | models.Q(pk__in=turn_ids))
            .count(),
            "lifecycle.journalentry": _journal_of(tenant, episode_ids).count(),
            "lifecycle.candidate": Candidate.objects.filter(tenant=tenant)
            .filter(models.Q(episode_id__in=episode_ids) | models.Q(other_id__in=episode_ids))
            .count(),
            "episodes.link": Link.objects.filter(tenant=tenant)
            .filter(models.Q(src_id__in=episode_ids) | models.Q(dst_id__in=episode_ids))
            .count(),
        },
        "redis": {
            "documents": (int(client.exists(*doc_keys)) if doc_keys else 0)
            + len(_user_documents(tenant, user_id)),
        },
        "queue": _queue_counts(*_queued(tenant, episode_ids)),
    }
    audit_record(
        tenant=tenant,
        action=FORGET_USER,
        actor=actor,
        now=now,
        user_hash=ForgottenUser.hash(tenant.pk, user_id),
        **_audit_detail(receipt),
    )
    return receipt


def _unlink(doc_keys: list[str]) -> int:
    removed = 0
    client = hot_store().client
    for start in range(0, len(doc_keys), 1000):
        removed += int(client.unlink(*doc_keys[start : start + 1000]))
    return removed


def _user_documents(tenant: Tenant, user_id: str) -> list[str]:
    """The tenant's hot documents that carry ``user_id`` (found through its index, so a document
    whose row is already gone is found too)."""
    store = hot_store()
    query = Query(f"@user_id:{{{keys.exact(user_id)}}}").no_content().paging(0, 10_000).dialect(2)
    try:
        result = store.client.ft(store.index_name(tenant.pk.hex)).search(query)
    except redis.ResponseError as exc:
        if "no such index" in str(exc).lower() or "unknown index" in str(exc).lower():
            return []  # the tenant has no hot index (yet): no document either
        raise
    return [_text(doc.id) for doc in result.docs]  # type: ignore[union-attr]


def _audit_detail(receipt: Receipt) -> dict[str, Any]:
    """Counts only: an audit record of an erasure holds nothing of what was erased."""
    return {"removed": receipt.removed, "clean": receipt.clean}
