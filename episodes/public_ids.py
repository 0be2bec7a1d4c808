"""Public ids: what the API calls an episode or a turn, and how it reads one back.

A public id is a ULID: 26 characters of Crockford's base32, 48 bits of milliseconds then 80 random bits, made
with the row. The row's integer key stays internal: it counts every tenant's writes, so a tenant that saw it
would see how much the others write (docs/decisions/0014-public-ids.md). A public id says when its row was
made and nothing else; two ids made in the same millisecond are in random order (no monotonic counter, which
would again count the writes in between).

Transition: a path or a body may still name an episode by its old integer id (``LEGACY``), until API
v2. Responses show public ids only.
"""

from __future__ import annotations

import re
import secrets
import time
from datetime import datetime

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
LENGTH = 26

#: What a public id looks like, in either case (ULIDs are read case-insensitively).
PATTERN = "[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}"
#: An old integer id, accepted during the transition.
LEGACY = "[1-9][0-9]{0,17}"
#: What names an episode in a path or a body.
REFERENCE = f"(?:{PATTERN}|{LEGACY})"

_REFERENCE = re.compile(REFERENCE)

#: A public id (upper case) or, during the transition, an old integer id.
Reference = str | int


def encode(value: int) -> str:
    """The 26 base32 characters of a 128-bit number."""
    chars = []
    for _ in range(LENGTH):
        value, digit = divmod(value, 32)
        chars.append(ALPHABET[digit])
    return "".join(reversed(chars))


def new(made_at: datetime | None = None) -> str:
    """A fresh public id. Its time is ``made_at`` (a row written earlier, given an id now) or the
    clock: the id records when its row was made, so it reads the clock like ``created_at`` does."""
    ms = int(made_at.timestamp() * 1000) if made_at else time.time_ns() // 1_000_000
    return encode((ms << 80) | secrets.randbits(80))


def parse(value: object) -> Reference:
    """The episode a caller names: a public id (upper-cased) or an old integer id. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("not an id")
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 3.0 is an integer to JSON
    if isinstance(value, int):
        if 1 <= value < 10**18:
            return value
        raise ValueError("not an id")
    if isinstance(value, str) and _REFERENCE.fullmatch(value):
        return int(value) if value.isdigit() and len(value) < LENGTH else value.upper()
    raise ValueError("not an id")


#: What a caller is told a memory's id is.
DESCRIPTION = "a memory's id (26 characters, a ULID; an old integer id is accepted during the transition)"
