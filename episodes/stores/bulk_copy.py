"""A batch's new turns written in one COPY, in binary.

The turns are the largest write of an ingest. Through the ORM, each row's values are formatted into
the statement's text and parsed back by the server, each vector as 384 numbers in decimal: for a
batch with vectors that took longer than everything else the batch writes together. COPY in binary
sends every value in its binary form, vectors in pgvector's
(docs/decisions/0055-ingest-at-the-embedders-speed.md). COPY returns no keys, so the turns take
theirs from the table's sequence first, in one statement that names the sequence, not the table.

The rows are the ORM's: every concrete field of ``Turn``, with the value its instance holds (its
defaults included), ``tenant_id`` among them, as the ORM's INSERT would write it. The triggers on
the table (``packed``, the packed windows) run as for any insert.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from django.db import connection
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types import TypeInfo

from ..models import Turn

#: psycopg's name of each column type the turns table has (``Field.db_type``, its length cut).
_TYPES = {
    "bigint": "int8",
    "integer": "int4",
    "uuid": "uuid",
    "text": "text",
    "varchar": "varchar",
    "varchar[]": "varchar[]",
    "jsonb": "jsonb",
    "timestamp with time zone": "timestamptz",
    "vector": "vector",
}


class _VectorDumper(Dumper):
    """pgvector's binary form (``vector_recv``): dimensions and an unused word (uint16 each), then
    big-endian float4s. Registered with the vector type's oid on the connection (``_vector_oid``)."""

    format = Format.BINARY  # type: ignore[assignment]

    def dump(self, obj: Any) -> bytes:
        values = np.asarray(obj, dtype=">f4").ravel()
        return struct.pack(">HH", values.size, 0) + values.tobytes()


def _column_type(db_type: str) -> str:
    base = db_type.split("(", 1)[0]
    return _TYPES[base + "[]" if db_type.endswith("[]") else base]


@functools.cache
def _columns() -> tuple[tuple[str, str, str], ...]:
    """(attribute, column, psycopg type name) of each concrete field of ``Turn``."""
    return tuple(
        (f.attname, str(f.column), _column_type(str(f.db_type(connection)))) for f in Turn._meta.concrete_fields
    )


def _vector_dumper(cursor: Any) -> int:
    """The vector type's oid in this database (looked up once per connection), with the binary
    dumper registered for it on ``cursor`` (psycopg picks a COPY column's dumper by its oid)."""
    info = cursor.connection.adapters.types.get("vector")
    if info is None:
        info = TypeInfo.fetch(cursor.connection, "vector")
        if info is None:
            raise RuntimeError("the vector type is missing: the pgvector extension is not installed")
        info.register(cursor.connection)
    cursor.adapters.register_dumper(None, type("VectorDumper", (_VectorDumper,), {"oid": info.oid}))
    return int(info.oid)


def turns_copy(turns: Sequence[Turn]) -> None:
    """Insert ``turns`` (instances not saved yet) in one COPY; each gets its primary key."""
    if not turns:
        return
    columns = _columns()
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [Turn._meta.db_table, Turn._meta.pk.column, len(turns)],
        )
        for turn, (pk,) in zip(turns, cursor.fetchall(), strict=True):
            turn.pk = pk
        raw = cursor.cursor
        names = ", ".join(quote(column) for _, column, _ in columns)
        statement = f"COPY {quote(Turn._meta.db_table)} ({names}) FROM STDIN (FORMAT BINARY)"
        vector = _vector_dumper(raw)
        with connection.wrap_database_errors, raw.copy(statement) as copy:
            copy.set_types([vector if kind == "vector" else kind for _, _, kind in columns])
            for turn in turns:
                copy.write_row([getattr(turn, attname) for attname, _, _ in columns])
    for turn in turns:
        turn._state.adding = False
        turn._state.db = connection.alias
