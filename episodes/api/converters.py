"""The path converter of a memory's id: a public id or, during the transition, an old integer id."""

from __future__ import annotations

from django.urls import register_converter

from .. import public_ids


class MemoryIdConverter:
    regex = public_ids.REFERENCE

    def to_python(self, value: str) -> public_ids.Reference:
        return public_ids.parse(value)

    def to_url(self, value: public_ids.Reference) -> str:
        return str(value)


register_converter(MemoryIdConverter, "memory")
