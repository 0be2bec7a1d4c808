"""Statements on the read path, run the fast way.

Django's PostgreSQL backend binds parameters on the client (every statement's text differs, so
nothing can be prepared) and reads ``timestamptz`` with a pure-Python loader (to attach its time
zone). On the read path that costs more than the statements themselves (docs/decisions/0004). ``fetch``
runs a statement on Django's connection (same transaction, same error handling) through a
psycopg cursor with server-side parameters: parameters sent apart, rows in binary (timestamps in
UTC, JSON parsed, arrays as lists).

Statements are not prepared: Django leaves psycopg's ``prepare_threshold`` at None, which turns
preparation off; planning, not parsing, is their cost (a generic plan of the warm/cold text
statement would be far slower than planning it each time).
"""

from __future__ import annotations

import contextlib
import functools
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import psycopg
from django.db import close_old_connections, connection
from psycopg.adapt import Dumper
from psycopg.pq import Format

from memory_platform.tenancy import statements

T = TypeVar("T")
_worker_lock = threading.Lock()
_worker_connections: dict[int, Any] = {}


def column_list(fields: Iterable[Any], alias: str = "") -> str:
    """A SELECT list of model fields' columns, quoted (``alias.`` before each when given)."""
    quote = connection.ops.quote_name
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{prefix}{quote(str(f.column))}" for f in fields)


class Vector:
    """A query vector as a ``fetch`` parameter (write ``%s::vector``): sent in pgvector's binary
    form (formatting its text form costs far more)."""

    __slots__ = ("values",)

    def __init__(self, values: Any):
        self.values = np.asarray(values, dtype=">f4").ravel()


class _VectorDumper(Dumper):
    format = Format.BINARY  # type: ignore[assignment]

    def dump(self, obj: Vector) -> bytes:
        # pgvector's vector_recv: dimensions and an unused word (uint16 each), then big-endian float4s.
        return struct.pack(">HH", obj.values.size, 0) + obj.values.tobytes()


def vector_of(raw: bytes) -> np.ndarray:
    """A vector column as ``fetch`` returns it (pgvector's binary form, as ``_VectorDumper``
    writes it) as float32."""
    return np.frombuffer(raw, dtype=">f4", offset=4).astype(np.float32)


def vector_rows(raws: Sequence[bytes]) -> np.ndarray:
    """Vector columns of one dimension (``vector_of`` each) as the rows of one float32 matrix,
    decoded at once (one conversion for a thousand vectors, not a thousand)."""
    joined = b"".join(memoryview(raw)[4:] for raw in raws)
    return np.frombuffer(joined, dtype=">f4").astype(np.float32).reshape(len(raws), -1)


def register_adapters(sender: Any, connection: Any, **kwargs: Any) -> None:
    """On every new database connection (``connection_created``, connected in the app's
    ``ready``): ``Vector`` parameters go in binary. The parameter's type is left to the server,
    which takes it from the ``::vector`` cast. (Per connection: a connection copies the global
    adapters when Django adds its own.)"""
    connection.connection.adapters.register_dumper(Vector, _VectorDumper)


def fetch(sql: str, params: Sequence[Any] = (), *, tenant: Any) -> list[tuple[Any, ...]]:
    """All rows of ``sql`` (``%s`` placeholders), parameters sent apart, rows in binary, for
    ``tenant`` (a ``Tenant`` or its id; None for a statement on no tenant's table): refused before
    it is sent unless it is limited to that tenant (``memory_platform.tenancy.statements.check``).

    The statement passes through the connection's ``execute_wrappers`` as a Django cursor's would,
    so what watches every statement (the test suite's tenant check, docs/operations/scale-out.md)
    sees these too."""
    statements.check(sql, params, tenant)
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:

        def execute(sql: str, params: Sequence[Any], many: bool, context: dict[str, Any]) -> None:
            cursor.execute(sql, params, binary=True)

        executor: Callable[..., None] = execute
        for wrapper in reversed(connection.execute_wrappers):
            executor = functools.partial(wrapper, executor)
        executor(sql, params, False, {"connection": connection, "cursor": cursor})
        return cursor.fetchall()


def expression_values(expressions: Sequence[tuple[str, Sequence[Any]]], *, tenant: Any) -> list[Any]:
    """The values of SQL expressions (each with its parameters), read in one statement for
    ``tenant``."""
    if not expressions:
        return []
    row = fetch_one(
        "SELECT " + ", ".join(sql for sql, _ in expressions),
        [value for _, values in expressions for value in values],
        tenant=tenant,
    )
    return list(row or ())


def fetch_one(sql: str, params: Sequence[Any] = (), *, tenant: Any) -> tuple[Any, ...] | None:
    rows = fetch(sql, params, tenant=tenant)
    return rows[0] if rows else None


class _TenantCursor:
    """A Django cursor whose ``execute`` refuses what ``fetch`` would (``statements.check``)."""

    __slots__ = ("_cursor", "_tenant")

    def __init__(self, cursor: Any, tenant: Any):
        self._cursor, self._tenant = cursor, tenant

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        statements.check(sql, params, self._tenant)
        return self._cursor.execute(sql, params)

    def __getattr__(self, name: str) -> Any:  # fetchone, fetchmany, rowcount, ...
        return getattr(self._cursor, name)


@contextlib.contextmanager
def cursor(tenant: Any) -> Iterator[Any]:
    """A Django cursor for statements of ``tenant``'s (a ``Tenant`` or its id), each refused before
    it is sent unless limited to that tenant, as ``fetch``'s are: for writes, and reads that stream
    (``fetchmany``) or need Django's loaders."""
    with connection.cursor() as raw:
        yield _TenantCursor(raw, tenant)


def in_worker(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` on a pool thread that keeps its own connection: replaced when it errored or
    grew old (request threads get this from Django at every request boundary), and remembered
    so ``close_worker_connections`` can close it."""
    close_old_connections()
    raw = connection.connection
    if raw is not None and raw.closed:
        # Closed from another thread (``close_worker_connections``, after a bulk load): this
        # thread's next statement opens a new one.
        connection.close()
    try:
        return fn(*args)
    finally:
        raw = connection.connection
        if raw is not None and _worker_connections.get(threading.get_ident()) is not raw:
            with _worker_lock:
                _worker_connections[threading.get_ident()] = raw


def close_worker_connections() -> None:
    """Close the pool threads' database connections (before dropping a test database)."""
    with _worker_lock:
        raw = list(_worker_connections.values())
        _worker_connections.clear()
    for conn in raw:
        conn.close()
