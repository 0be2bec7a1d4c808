"""Every statement on a table distributed by tenant carries its tenant: checked for the whole run.

On Citus (docs/operations/scale-out.md) a statement is sent to one tenant's shard only when it
names the distribution column, ``tenant_id``; one that does not is sent to every shard. The
recorder sees every statement the run sends: Django's cursors and ``memory_platform.db.fetch``
through the connection's ``execute_wrappers``, installed on each connection as it opens
(``connection_created``), so the worker threads' connections too. Each statement that touches a
distributed table must compare ``tenant_id`` with a parameter (``= %s``, ``IN (%s, ...)``,
``= ANY(%s)``), or be an INSERT that writes ``tenant_id``. What else may run is ``ALLOWED``, each
entry with its reason. Anything left fails the run, with the test, the line of code and the SQL.

A regular expression over the statement's text, its verdict cached per text: the code that
explains an exception (which frames sent it) runs only for statements that fail it.

Not seen: ``manage.py`` processes a test starts (their own interpreter), the binary COPY of new
episodes and turns (``episodes/stores/bulk_copy.py``: psycopg's ``copy``, whose rows each carry
their ``tenant_id``), and what the embedded servers' management runs on its own connections
(settings, no tenant tables).
"""

from __future__ import annotations

import re
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db.backends.signals import connection_created

from memory_platform.tenancy.statements import TENANT_PREDICATE, tenant_tables

ROOT = Path(__file__).resolve().parents[1]

#: What may touch a distributed table without a tenant parameter, and why.
ALLOWED = {
    "migration": "a migration's schema changes and data migrations run over every tenant's rows once",
    "schema": "CREATE, ALTER, DROP, TRUNCATE, ANALYZE, VACUUM: the test database's setup and flush, "
    "not a statement on rows of a tenant",
    "across_tenants": "an ORM query that says why it crosses tenants, across_tenants(reason) "
    "(the places are listed by test_the_places_that_cross_tenants_are_the_known_ones)",
    "test": "a statement of a test's own, inspecting or preparing rows, not the application's",
    "deletion": "Django's deletion collector: an instance's or a queryset's delete() removes the "
    "collected rows and their cascades by primary key",
}


_SCHEMA = re.compile(r"\s*(CREATE|ALTER|DROP|TRUNCATE|ANALYZE|VACUUM|REINDEX|COMMENT|SET|RESET)\b", re.I)
_INSERT = re.compile(r'\s*INSERT\s+INTO\s+"?(\w+)"?\s*\(([^)]*)\)', re.I)


@dataclass(frozen=True)
class Verdict:
    """What the text of a statement says: the distributed tables it touches, and whether it names
    their tenant (or is schema)."""

    tables: tuple[str, ...]
    fine: str  # "" when it needs an allowance: else "not distributed", "tenant", "insert", "schema"
    #: It names a tenant, but another distributed table in it is reached by a key alone (a join on
    #: an episode's id): see ``Checker.joined_by_key``.
    joined_by_key: bool = False


# A table after FROM, JOIN, UPDATE or a comma, and its alias when it has one.
_NOT_ALIAS = (
    "ON|WHERE|LEFT|RIGHT|INNER|OUTER|FULL|CROSS|JOIN|SET|ORDER|GROUP|LIMIT|UNION|USING|LATERAL|"
    "FOR|RETURNING|HAVING|WINDOW|OFFSET"
)


class Checker:
    """Reads statements' text (``verdict``) and decides, for one that names no tenant, whether an
    allowance covers it where it runs (``explain``)."""

    def __init__(self, tables: dict[str, bool]):
        self.distributed = frozenset(t for t, d in tables.items() if d)
        self.local = frozenset(t for t, d in tables.items() if not d)
        names = "|".join(sorted(map(re.escape, tables), key=len, reverse=True))
        self._tables = re.compile(rf'(?<![\w.])"?({names})"?(?!\w)')
        self._occurrences = re.compile(
            rf'(?:FROM|JOIN|UPDATE|,)\s+"?({names})"?(?:\s+(?:AS\s+)?"?(?!(?:{_NOT_ALIAS})\b)(\w+)"?)?',
            re.I,
        )
        self._cache: dict[str, Verdict] = {}

    def verdict(self, sql: str) -> Verdict:
        cached = self._cache.get(sql)
        if cached is None:
            cached = self._cache[sql] = self._read(sql)
        return cached

    def _read(self, sql: str) -> Verdict:
        found = set(self._tables.findall(sql))
        tables = tuple(sorted(found & self.distributed))
        if not found:
            return Verdict((), "not tenant-owned")
        if not tables:
            return Verdict((), "not distributed")
        if _SCHEMA.match(sql):
            return Verdict(tables, "schema")
        insert = _INSERT.match(sql)
        if insert and insert.group(1) in tables and re.search(r"\btenant_id\b", insert.group(2)):
            return Verdict(tables, "insert")
        if TENANT_PREDICATE.search(sql):
            return Verdict(tables, "tenant", self.joined_by_key(sql))
        return Verdict(tables, "")

    def joined_by_key(self, sql: str) -> bool:
        """Whether one of the distributed tables a statement reads (each by its alias) has no
        tenant of its own: neither ``<alias>.tenant_id`` compared with a parameter nor equal to
        another's ``tenant_id``. Citus sends such a statement to one shard only when every
        distributed table in it is limited to that tenant or joined on ``tenant_id``; a join on an
        episode's id alone is not (docs/decisions/0053-postgres-distributable-by-tenant.md). Not
        a failure: a measure of what is left."""
        aliases = [
            alias or table for table, alias in self._occurrences.findall(sql) if table in self.distributed
        ]
        if len(aliases) < 2:
            return False
        for alias in aliases:
            own = rf'(?<![\w"])"?{re.escape(alias)}"?\."?tenant_id"?'
            with_parameter = rf"{own}\s*(?:=\s*(?:%s|ANY\s*\(\s*%s)|IN\s*\(\s*%s)"
            joined = rf'{own}\s*=\s*\(?"?\w+"?\."?tenant_id|tenant_id"?\)?\s*=\s*\(?{own}'
            if not re.search(f"{with_parameter}|{joined}", sql, re.I):
                return True
        return False

    def explain(self, frames: Iterator[Any], *, tests_allowed: bool = True) -> tuple[str, str]:
        """(the allowance that covers a statement without its tenant, or "", where it was sent
        from: the innermost frame of the project's code) for the frames of the sending thread,
        innermost first. ``tests_allowed=False`` judges a test's own statement as the
        application's."""
        origin = ""
        allowance = "migration" if _migrating.depth else ""
        for frame in frames:
            path = frame.f_code.co_filename
            if "/migrations/" in path and path.startswith(_PROJECT) and not path.startswith(_VENV):
                allowance = allowance or "migration"  # a test that calls a migration's function
            elif path.endswith("django/db/models/deletion.py"):
                allowance = allowance or "deletion"
            if path == _SCOPING:
                scope = getattr(frame.f_locals.get("self"), "_tenant_scope", None)
                if scope not in (None, "tenant"):
                    allowance = allowance or "across_tenants"
            elif (
                not origin
                and path.startswith(_PROJECT)
                and not path.startswith(_VENV)
                and path not in _PASS_THROUGH
            ):
                origin = f"{Path(path).relative_to(ROOT)}:{frame.f_lineno} {frame.f_code.co_name}"
        if not allowance and tests_allowed and origin.startswith("tests/"):
            allowance = "test"
        return allowance, origin


_PROJECT = str(ROOT) + "/"
_VENV = str(ROOT / ".venv") + "/"
_SCOPING = str(ROOT / "memory_platform/tenancy/scoping.py")
# Frames that only pass a statement on: where it comes from is further out.
_PASS_THROUGH = frozenset({__file__, str(ROOT / "memory_platform/db.py"), _SCOPING})


class _Migrating(threading.local):
    depth = 0


_migrating = _Migrating()


@dataclass
class Unscoped:
    """A statement on a distributed table that named no tenant and had no allowance."""

    sql: str
    tables: tuple[str, ...]
    origin: str
    test: str


class Recorder:
    """The pytest plugin: counts every statement, keeps those without their tenant, fails the run
    on any."""

    def __init__(self) -> None:
        self.checker = Checker(tenant_tables())
        self.statements = 0
        self.counts: Counter[str] = Counter()
        self.unscoped: list[Unscoped] = []
        #: Statements that name their tenant but join a distributed table by a key alone: where
        #: each distinct one was first sent from, and how often it ran.
        self.joined_by_key: dict[str, tuple[str, int]] = {}
        self.test = "(outside a test)"
        #: Where reports go: the run's list, or a test's own (``collecting``).
        self._sink: Callable[[Unscoped], None] = self.unscoped.append
        self._tests_allowed = True
        self._lock = threading.Lock()  # statements come from worker threads too

    # --- on every statement ------------------------------------------------------------------------
    def __call__(self, execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any) -> Any:
        self.check(sql if isinstance(sql, str) else str(sql), sys._getframe(1))
        return execute(sql, params, many, context)

    def check(self, sql: str, frame: Any) -> str:
        """What covers ``sql``, sent from ``frame``: a ``Verdict.fine`` or an ``ALLOWED`` key; ""
        when nothing does (and then it is reported)."""
        verdict = self.checker.verdict(sql)
        fine = verdict.fine
        if not fine:
            fine, origin = self.checker.explain(_frames(frame), tests_allowed=self._tests_allowed)
            if not fine:
                self._sink(Unscoped(sql, verdict.tables, origin, self.test))
        elif verdict.joined_by_key:
            seen = self.joined_by_key.get(sql)
            origin = seen[0] if seen else self.checker.explain(_frames(frame))[1]
            with self._lock:
                self.joined_by_key[sql] = (origin, (seen[1] if seen else 0) + 1)
        with self._lock:
            self.statements += 1
            self.counts[
                fine or ("unscoped" if self._tests_allowed else "reported to a test of the check")
            ] += 1
        return fine

    @contextmanager
    def collecting(self) -> Iterator[list[Unscoped]]:
        """Statements without their tenant reported into a list of the caller's rather than the
        run's, the caller's own judged as the application's (a test of the check itself)."""
        found: list[Unscoped] = []
        sink, self._sink, self._tests_allowed = self._sink, found.append, False
        try:
            yield found
        finally:
            self._sink, self._tests_allowed = sink, True

    def install(self, sender: Any = None, connection: Any = None, **kwargs: Any) -> None:
        if connection.vendor == "postgresql" and self not in connection.execute_wrappers:
            connection.execute_wrappers.insert(0, self)

    # --- pytest hooks ------------------------------------------------------------------------------
    def pytest_configure(self, config: pytest.Config) -> None:
        from django.db import connections
        from django.db.migrations.migration import Migration

        connection_created.connect(self.install, dispatch_uid="tenant_statements")
        for connection in connections.all(initialized_only=True):
            if connection.connection is not None:
                self.install(connection=connection)
        for name in ("apply", "unapply"):
            setattr(Migration, name, _while_migrating(getattr(Migration, name)))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        self.test = item.nodeid
        try:
            return (yield)
        finally:
            self.test = "(between tests)"

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.unscoped and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write = terminalreporter.write_line
        checked = self.statements - self.counts["not tenant-owned"] - self.counts["not distributed"]
        terminalreporter.section("statements on tables distributed by tenant")
        write(
            f"{self.statements} statements, {checked} on distributed tables: "
            + ", ".join(f"{n} {why}" for why, n in self.counts.most_common())
        )
        if self.joined_by_key:
            runs = sum(n for _, n in self.joined_by_key.values())
            write(
                f"{runs} of them ({len(self.joined_by_key)} distinct) name their tenant but join "
                "another distributed table by its key alone (not a failure: docs/decisions/0053):"
            )
            places = Counter[str]()
            for origin, n in self.joined_by_key.values():
                places[origin] += n
            for origin, n in places.most_common(12):
                write(f"  {n} x {origin}")
        if not self.unscoped:
            return
        by_place = Counter((u.origin, u.tables, u.sql) for u in self.unscoped)
        first = {}
        for u in self.unscoped:
            first.setdefault((u.origin, u.tables, u.sql), u.test)
        write(f"{len(self.unscoped)} statements without their tenant ({len(by_place)} distinct):", red=True)
        for (origin, tables, sql), n in by_place.most_common():
            write(f"  {n} x {origin or '(no frame of the project)'} on {', '.join(tables)}", red=True)
            write(f"      first in {first[(origin, tables, sql)]}")
            write(f"      {_shortened(sql)}")


def _shortened(sql: str) -> str:
    """The statement with its long column lists cut (they are what makes it long, never why it fails)."""
    return re.sub(r'(?:(?:"\w+"\.)?"\w+",\s*){3,}(?:"\w+"\.)?"\w+"', "…", " ".join(sql.split()))[:1200]


def _frames(frame: Any) -> Iterator[Any]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _while_migrating(method: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        _migrating.depth += 1
        try:
            return method(*args, **kwargs)
        finally:
            _migrating.depth -= 1

    return wrapped
