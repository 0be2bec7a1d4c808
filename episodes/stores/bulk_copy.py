"""A batch's new rows (turns, episodes) written in one COPY, in binary.

The turns and episodes are the largest writes of an ingest. Through the ORM, each row's values are
formatted into the statement's text and parsed back by the server, each vector as 384 numbers in
decimal: for a batch with vectors that took longer than everything else the batch writes together.
COPY in binary sends every value in its binary form, vectors in pgvector's
(docs/decisions/0055-ingest-at-the-embedders-speed.md). COPY returns no keys, so the rows take
theirs from the table's sequence first, in one statement that names the sequence, not the table.

The rows are the ORM's: every concrete field of the model, with the value its instance holds (its
defaults included), ``tenant_id`` among them, as the ORM's INSERT would write it; but a full-text
column (``tsvector``), which the table's trigger computes on insert whatever it is sent. The
triggers run as for any insert.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from django.db import connection, models
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types import TypeInfo

#: psycopg's name of each column type the copied tables have (``Field.db_type``, its length cut).
_TYPES = {
    "bigint": "int8",
    "integer": "int4",
    "boolean": "bool",
    "double precision": "float8",
    "uuid": "uuid",
    "text": "text",
    "text[]": "text[]",
    "varchar": "varchar",
    "varchar[]": "varchar[]",
    "jsonb": "jsonb",
    "timestamp with time zone": "timestamptz",
    "vector": "vector",
}
#: Computed by the table's trigger on insert.
_COMPUTED = frozenset({"tsvector"})


class _VectorDumper(Dumper):
    """pgvector's binary form (``vector_recv``): dimensions and an unused word (uint16 each), then
    big-endian float4s. Registered with the vector type's oid on the COPY's cursor."""

    format = Format.BINARY  # type: ignore[assignment]

    def dump(self, obj: Any) -> bytes:
        values = np.asarray(obj, dtype=">f4").ravel()
        return struct.pack(">HH", values.size, 0) + values.tobytes()


def _column_type(db_type: str) -> str:
    array = db_type.endswith("[]")
    base = db_type.removesuffix("[]").split("(", 1)[0]
    return _TYPES[base + "[]" if array else base]


@functools.cache
def _columns(model: type[models.Model]) -> tuple[tuple[str, str, str], ...]:
    """(attribute, column, psycopg type name) of each concrete field of ``model`` COPY writes."""
    fields = [(f, str(f.db_type(connection))) for f in model._meta.concrete_fields]
    return tuple(
        (f.attname, str(f.column), _column_type(db_type)) for f, db_type in fields if db_type not in _COMPUTED
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


def copy_rows(rows: Sequence[models.Model]) -> None:
    """Insert ``rows`` (instances of one model, not saved yet) in one COPY; each gets its key."""
    if not rows:
        return
    meta = type(rows[0])._meta
    columns = _columns(type(rows[0]))
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [meta.db_table, meta.pk.column, len(rows)],
        )
        for row, (pk,) in zip(rows, cursor.fetchall(), strict=True):
            row.pk = pk
        raw = cursor.cursor
        names = ", ".join(quote(column) for _, column, _ in columns)
        statement = f"COPY {quote(meta.db_table)} ({names}) FROM STDIN (FORMAT BINARY)"
        vector = _vector_dumper(raw)
        with connection.wrap_database_errors, raw.copy(statement) as copy:
            copy.set_types([vector if kind == "vector" else kind for _, _, kind in columns])
            for row in rows:
                copy.write_row([getattr(row, attname) for attname, _, _ in columns])
    for row in rows:
        row._state.adding = False
        row._state.db = connection.alias
