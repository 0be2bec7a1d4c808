"""Whether this Redis's full-text scores go wrong between a removal and its collection, and what
the hot tier holds against it where they do.

RediSearch counts a removed (or rewritten) document in its words' document frequencies until its
garbage collector runs. Up to 2.10.24 its BM25 then subtracts the frequency from the number of
documents in unsigned arithmetic: past that number, a word in nearly every document weighs about
40 instead of about 0 and outranks every other (docs/decisions/0033). Later releases clamp the
difference.

On a server that wraps, each tenant's index holds ``BALLAST`` documents of a word no one searches
for: they count in the number of documents and in no searched word's frequency, so a frequency stays under that number
while fewer than ``BALLAST`` removed documents wait for the collector. The collector then need
only run on an index once it lost half that many (`embedded.redis.GC_SETTINGS`), not after every
removal, and so need the platform's own calls after a batch of removals (RediSearch applies the
same threshold to them): each run forks Redis, which stops every tenant's requests for a moment,
and a few hundred tenants writing at once kept Redis forking
(docs/decisions/0060-ballast-against-the-idf-wrap.md). On a server that clamps, none of that is
needed.

The answer is measured rather than read from a version: ten documents sharing a word, one of them
rewritten, searched before any collector can have run.
"""

from __future__ import annotations

import uuid
from typing import Any

from memory_platform.redis_client import on_owner_of

from . import keys

#: Ballast documents in each tenant's index where BM25 wraps. At 64 the development conversations
#: rank as without them (docs/decisions/0060); more lift the weight of a small tenant's common
#: words further (the number of documents grows, not the words' frequencies).
BALLAST = 64

#: A ballast document's text: a word no one searches for, as many times as a turn's window holds
#: words to index (about 50 in the development conversations), so the mean document length BM25
#: divides by stays what the tenant's own documents make it; short, so the 64 take 20 KB of Redis.
#: No filter of the platform's matches a ballast document: it has no tenant, type or state.
BALLAST_TEXT = " ".join(["qz"] * 48)

#: A top score above this after the rewrite is the wrapped IDF (about 89 here; about 3 without).
WRAPPED_SCORE = 20.0


def hold_ballast(client: Any, tenant_hex: str) -> None:
    """Write the tenant's ``BALLAST`` documents unless they are there."""
    ballast = [keys.ballast_key(tenant_hex, i) for i in range(BALLAST)]
    if client.exists(ballast[-1]):
        return
    pipe = client.pipeline(transaction=False)
    for key in ballast:
        pipe.hset(key, "text", BALLAST_TEXT)
    pipe.execute()


def idf_wraps(client: Any) -> bool:
    """Ask the server once: True when a rewrite sends the scores of a word in every document up."""
    run = uuid.uuid4().hex[:12]
    prefix = f"mp:probe:{{bm25-{run}}}:"  # one slot: index and documents on one master of a cluster
    name = f"{prefix}idx"
    owner = on_owner_of(client, name)
    client.execute_command(
        "FT.CREATE", name, "ON", "HASH", "PREFIX", 1, prefix, "SCHEMA", "text", "TEXT", **owner
    )  # fmt: skip
    try:
        for i in range(10):
            client.hset(f"{prefix}{i}", mapping={"text": f"common word {'rare' if i == 3 else 'plain'} {i}"})
        client.delete(f"{prefix}5")
        client.hset(f"{prefix}5", mapping={"text": "common word plain 5"})
        reply = client.execute_command(
            "FT.SEARCH", name, "common|rare", "WITHSCORES", "NOCONTENT", "SCORER", "BM25STD",
            "LIMIT", 0, 1, "DIALECT", 2, **owner,
        )  # fmt: skip
        return top_score(reply) > WRAPPED_SCORE
    finally:
        client.execute_command("FT.DROPINDEX", name, "DD", **owner)


def top_score(reply: Any) -> float:
    """The first result's score, from a RESP3 (map) or RESP2 (list) reply."""
    if isinstance(reply, dict):
        results = reply.get(b"results") or reply.get("results") or []
        if not results:
            return 0.0
        first = results[0]
        return float(first.get(b"score", first.get("score", 0.0)))
    return float(reply[2]) if len(reply) > 2 else 0.0
