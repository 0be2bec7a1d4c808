"""The isolation suite's strategies: what a tenant sends, with ids and values of all three."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from episodes.models import LinkKind

from .world import (
    AGENTS,
    BY_ID,
    EDGE_IDS,
    KIND_VALUES,
    KINDS,
    LABELS,
    LOOKALIKES,
    NAMED_USERS,
    QUERY_WORDS,
    SYNTAX,
    TAG_VALUES,
    TIMES,
    WRAPS,
    World,
)


# --- strategies -----------------------------------------------------------------------------------
def case_variant(base: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(base), max_size=len(base)).map(
        lambda ups: "".join(c.upper() if up else c.lower() for c, up in zip(base, ups, strict=True))
    )


def variants(known: Sequence[str], bases: Sequence[str]) -> st.SearchStrategy[str]:
    """Values the data holds (a third of the time), case variants of them, and the same in query
    syntax, in the hot index's own encoding or padded with blanks (which the API trims)."""
    exact = st.sampled_from(known)
    return st.one_of(
        exact,
        exact,
        st.sampled_from(bases).flatmap(case_variant),
        st.tuples(st.sampled_from(WRAPS), st.sampled_from(bases)).map(lambda p: p[0].format(p[1])),
        st.sampled_from(bases).map(lambda b: "x" + b.encode().hex()),
        st.sampled_from(bases).map(lambda b: f" {b}\t"),
    )


def sometimes_invalid(body: st.SearchStrategy[dict], invalid: Sequence[dict]) -> st.SearchStrategy[dict]:
    """One body in eight gets a field that makes it a 400, so the refusals are probed too."""
    return st.tuples(body, st.integers(0, 7), st.sampled_from(invalid)).map(
        lambda p: {**p[0], **p[2]} if p[1] == 7 else p[0]
    )


def steps(worlds: dict[str, World]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """Steps (operation, parameters) any tenant may send, with ids and values of all three."""
    # An episode of some tenant: by its public id (as shown, or in lower case) or by its old
    # integer id, which the API still takes.
    # Each list in the order the worlds were written, not sorted: public ids are random, and sorted
    # they would give a draw another owner on every run (and an action its own ids 3 times or 9).
    ordered = [worlds[label] for label in sorted(worlds)]
    episode_ids = [i for w in ordered for i in w.originals]
    legacy_ids = [w.pks[i] for w in ordered for i in w.originals]
    turn_ids = [i for w in ordered for i in w.turn_ids]
    turn_pks = [i for w in ordered for i in w.turn_pks]
    shown = st.sampled_from(episode_ids)
    some_episode = st.one_of(shown, shown, shown.map(str.lower), st.sampled_from(legacy_ids))
    any_id = st.one_of(
        some_episode, st.sampled_from(turn_ids), st.sampled_from(turn_pks), st.sampled_from(EDGE_IDS)
    )
    sessions = sorted({f.session_id for w in worlds.values() for f in w.originals.values()})
    hexes = [w.tenant.id.hex for w in worlds.values()]

    # The users the data holds come up half the time, so user-scoped answers have memories to check.
    named = st.sampled_from(NAMED_USERS)
    user = st.one_of(
        named, named, variants(NAMED_USERS, NAMED_USERS), st.sampled_from(LOOKALIKES), st.just("")
    )
    agent = variants(AGENTS, ("bot",))
    session = variants(sessions, ("trip-1", "desk", "only-A", "only-B"))
    kind = st.one_of(st.sampled_from(KIND_VALUES), variants(("fact", "Fact", "note-a"), ("fact", "note-a")))
    # Kinds a memory is written with (a slug): the ones the data holds, mostly.
    slug_kind = st.one_of(
        st.sampled_from(KINDS), st.sampled_from(KINDS), st.sampled_from(KINDS).flatmap(case_variant)
    )
    tag = st.one_of(st.sampled_from(TAG_VALUES), variants(("red,blue", "a|b"), ("red,blue", "a|b", "tag-B")))
    word = st.one_of(
        st.sampled_from(QUERY_WORDS),
        st.sampled_from(hexes).map(lambda h: f"@tenant:{{{h}}}"),
        st.text(alphabet=SYNTAX + "ab ", min_size=1, max_size=6),
    )
    query = st.one_of(
        st.lists(word, min_size=1, max_size=6).map(" ".join), st.lists(word, max_size=4).map("".join)
    )
    vector = st.tuples(st.sampled_from(LABELS), st.integers(0, 38)).map(lambda p: f"vec:{p[0]}:{p[1]}")
    when = st.sampled_from(TIMES)
    reader = st.sampled_from([False, False, False, True])
    tenant_field = {"tenant": "isolation-B"}

    @st.composite
    def fields(draw, spec: dict[str, tuple[st.SearchStrategy, int]]) -> dict[str, Any]:
        """Each field present with probability 1/n (on the highest draw: hypothesis leans to 0)."""
        return {name: draw(s) for name, (s, n) in spec.items() if draw(st.integers(0, n - 1)) == n - 1}

    scope = {"user_id": (user, 2), "agent_id": (agent, 4), "session_id": (session, 3)}

    def search_body(body: dict[str, Any]) -> dict[str, Any]:
        if "query" not in body and "vector" not in body:
            body["vector"] = "vec:A:1"  # a search names a query or a vector
        return body

    search = fields(
        {
            "query": (query, 2),
            "vector": (vector, 2),
            **scope,
            "kinds": (st.lists(kind, min_size=1, max_size=3), 4),
            "tags": (st.lists(tag, min_size=1, max_size=3), 4),
            "layers": (st.lists(st.sampled_from(["hot", "warm", "cold"]), min_size=1, max_size=3), 3),
            "occurred_from": (when, 5),
            "occurred_to": (when, 5),
            "limit": (st.sampled_from([1, 3, 10, 50, 100]), 3),
            "depth": (st.sampled_from(["shallow", "deep"]), 4),
            "view": (st.sampled_from(["compact", "full"]), 2),
            "include_dormant": (st.booleans(), 4),
            "explain": (st.booleans(), 4),
        }
    ).map(search_body)
    search = sometimes_invalid(
        search,
        [
            {"layers": ["HOT"]}, {"layers": []}, {"limit": 0}, {"limit": 101}, {"vector": "bad:short"},
            {"query": "secret\x00alice"}, {"occurred_from": "yesterday"}, {"occurred_to": "2024-13-01"},
            {"depth": "deeper"}, {"view": "brief"}, {"kinds": "fact"}, {"user_id": ["alice"]}, tenant_field, {"tenant_id": hexes[1]},
        ],
    )  # fmt: skip
    activate = st.tuples(
        st.one_of(slug_kind, kind),
        fields({"query": (query, 2), **scope, "limit": (st.sampled_from([1, 5, 50]), 3)}),
    )
    activate = sometimes_invalid(
        activate.map(lambda p: {"kind": p[0], **p[1]}),
        [{"limit": 0}, {"kind": ""}, {"query": "secret\x00alice"}, tenant_field],
    )
    context = fields(
        {
            "query": (query, 2),
            **scope,
            "max_tokens": (st.sampled_from([50, 200, 2000, 20000]), 3),
            "limit": (st.sampled_from([1, 10, 50]), 3),
        }
    )
    context = sometimes_invalid(
        context, [{"max_tokens": 10}, {"limit": 0}, {"session_id": ["s"]}, tenant_field]
    )
    listing = fields(
        {
            **scope,
            "kind": (kind, 4),
            "tag": (tag, 4),
            "layer": (st.sampled_from(["hot", "warm", "cold"]), 4),
            "state": (st.sampled_from(["active", "forgotten", "dormant"]), 6),
            "anchor": (st.sampled_from(["true", "false"]), 5),
            "limit": (st.sampled_from([1, 5, 200]), 4),
            "cursor": (any_id.map(str), 5),
        }
    )
    listing = sometimes_invalid(
        listing,
        [{"layer": "Hot"}, {"state": "x"}, {"anchor": "maybe"}, {"limit": 0}, {"cursor": "!!"}, tenant_field],
    )

    def forget_body(body: dict[str, Any]) -> dict[str, Any]:
        # Forgetting for real is undone by restoring each id: everything at once only as a dry run.
        body["dry_run"] = bool(body.get("dry_run") or body.get("all") or "retrievability_below" in body)
        return body

    forget = fields(
        {
            **scope,
            "kind": (slug_kind, 3),
            "tags": (st.lists(tag, min_size=1, max_size=2), 5),
            "layer": (st.sampled_from(["hot", "warm", "cold"]), 5),
            "older_than": (when, 5),
            "anchor": (st.booleans(), 6),
            "retrievability_below": (st.sampled_from([0.0, 0.5, 1.0]), 6),
            "all": (st.booleans(), 6),
            "dry_run": (st.booleans(), 1),
        }
    )
    forget = sometimes_invalid(
        forget, [{"older_than": "2024-13-01"}, {"layer": "HOT"}, {"retrievability_below": 2}, tenant_field]
    ).map(forget_body)
    write_scope = {
        **scope,
        "session_id": (st.one_of(session, st.sampled_from(["only-A", "only-B", "only-C"])), 2),
    }
    memory = fields(
        {
            **write_scope,
            "kind": (st.one_of(slug_kind, kind), 2),
            "tags": (st.lists(tag, min_size=1, max_size=3), 2),
        }
    )
    refused = st.sampled_from([{}, {}, {}, tenant_field, {"tenant_id": hexes[1]}, {"episode_id": 1}])

    def step(op: str, **spec: st.SearchStrategy) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
        return st.fixed_dictionaries(spec).map(lambda params: (op, params))

    by_id = {"action": st.sampled_from(list(BY_ID)), "reader": reader}
    ids = st.lists(any_id, max_size=3, unique=True)
    # Repeated entries weigh the choice: searches and reads are what an attacker sends most. The
    # first entries come up a little more often (hypothesis leans towards its simplest choices).
    return st.one_of(
        step("search", body=search),
        step("context", body=context),
        step("list", params=listing, reader=reader),
        step("by_id", episode_id=some_episode, **by_id),
        step("search", body=search),
        step("activate", body=activate),
        step("forget", body=forget, reader=reader),
        step("by_id", episode_id=any_id, **by_id),
        step(
            "links",
            method=st.sampled_from(["post", "delete"]),
            source=st.one_of(some_episode, any_id),
            target=st.one_of(some_episode, any_id),
            kind=st.sampled_from([None, *LinkKind.values]),
        ),
        step(
            "feedback", used=st.lists(some_episode, min_size=1, max_size=2), unused=st.just([]), reader=reader
        ),
        step("feedback", used=ids, unused=ids, reader=reader),
        step("search", body=search),
        step("context", body=context),
        step("list", params=listing, reader=reader),
        step("write_memory", body=memory, extra=refused),
        step("write_turns", body=fields(write_scope)),
        step("whoami", reader=st.booleans()),
    )
