"""The isolation suite (hardening issue, finding "isolation suite").

Three tenants write memories that carry their own marker text, for users "alice", "ALICE" and
"Alice" (each with a marker of their own), under session ids, kinds and tags that hold letter-case
variants and query-syntax characters; some of them are packed warm and cold. Then a seeded
hypothesis run sends more than 10,000 requests, each from one of the tenants, to every endpoint of
the API: other tenants' episode and turn ids in paths and bodies (feedback, links, cursors), their
sessions, kinds, tags and vectors as filters and queries, RediSearch and Postgres query syntax and
case variants in every filter value, filters that match nothing, forget by filter. It proves that

- no response to one tenant carries another tenant's marker text or episode ids;
- a request naming another tenant's id answers 404 and changes nothing of that tenant: its rows,
  links, turns and usage counts are compared after every mutating request, its Redis documents
  after every example, and at the end each tenant's Postgres and Redis agree;
- no answer scoped to user "ALICE" carries a memory of "alice" or "Alice", nor the reverse
  (search, activate, context, the memory list, forget by filter): letter case is exact;
- a filter that matches nothing answers an empty result, never a fallback to other memories;
- nothing answers 5xx.

It is one test function: the tenants are written once, then the hypothesis run (which cannot take
function-scoped fixtures) is called inside it. The attacking tenant's own changes (forget, pin,
unpack, links, writes) are undone in the same step, so every check knows what the data holds.
Violations are collected rather than raised at the first one, so a failing run lists every kind
of leak with the exact request that showed it.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from episodes.models import Episode, Layer, Link, LinkKind
from episodes.selectors import encode_cursor
from episodes.stores.hot import hot_store
from lifecycle.services import episode_pack
from retrieval.usage import recorder
from tests.conftest import Caller, unit_vectors
from tests.lifecycle.factories import assert_consistent

pytestmark = pytest.mark.django_db(transaction=True)

API = "/api/v1"
#: Each example is one tenant sending this many steps (a step is one request or a few).
EXAMPLES = 1000
STEPS_PER_EXAMPLE = 10
MIN_REQUESTS = 10_000

LABELS = ("A", "B", "C")
SUFFIX = {"A": "7c1f", "B": "3d8a", "C": "5e0b"}
NAMED_USERS = ("alice", "ALICE", "Alice")
#: "" writes conversations and memories without a user.
USERS = (*NAMED_USERS, "")
AGENTS = ("bot", "BOT", "")

# fmt: off
#: Each user's sessions: "trip-1" is shared by every user, "desk" comes in one letter case each,
#: and alice also has "only-<tenant>", which no other tenant has.
SESSIONS = {"alice": ("trip-1", "desk"), "ALICE": ("trip-1", "DESK"), "Alice": ("trip-1", "Desk"), "": ("trip-1", "dEsK")}
#: (kind, tags, anchor, agent) of each user's memories; "note-<tenant>" is a kind only that tenant has.
MEMORIES = (
    ("fact", ["red,blue", "a|b", "tag-{label}"], True, "bot"),
    ("Fact", ["x-y", "{{c}}", "@t", "ALICE"], False, "BOT"),
    ("note-{lower}", ["*", "a b", "red", "ünï"], False, ""),
)
TAG_VALUES = (
    "red,blue", "red", "blue", "RED,BLUE", "a|b", "a", "b", "x-y", "x", "{c}", "c", "@t", "*", "a b",
    "ALICE", "alice", "Alice", "ünï", "ÜNÏ", "tag-A", "tag-B", "tag-C", "Tag-A", "%", "\\", "red blue",
)
KINDS = ("fact", "Fact", "conversation", "note-a", "note-b", "note-c")
KIND_VALUES = (
    "fact", "Fact", "FACT", "conversation", "Conversation", "preference", "note-a", "note-b", "note-c",
    "Note-A", "fact|conversation", "fact,Fact", "*", "%", "@kind:{fact}", "fact*", "x" + b"fact".hex(),
)
#: Ways to dress a filter value in query syntax: none of them is a value the data holds.
WRAPS = (
    "{0}*", "*{0}", "%{0}%", "{0}%", "{0}|{0}", "{{{0}}}", "@user_id:{{{0}}}", "({0})", '"{0}"', "'{0}'",
    "-{0}", "{0} OR x", "{0},x", "{0};x", "{0}\\", "~{0}", "{0}:*", "{0}\u200b", "{0}'--", "$${0}",
)
#: Near misses: a Turkish dotted I, Cyrillic letters, full-width letters, a combining accent.
LOOKALIKES = ("ALİCE", "аlice", "ａｌｉｃｅ", "alicе", "ALIC", "alicee", "al ice", "ALICE\u0301")
QUERY_WORDS = (
    "marker", "tenantA", "tenantB", "tenantC", "7c1f", "3d8a", "5e0b", "secret", "of", "alice", "ALICE",
    "Alice", "launch", "plan", "ledger", "remembers", "fact", "note", "trip", "desk", "the", "and",
    "*", "%", "@tenant:{*}", "@user_id:{alice}", "-@doctype:{episode}", "@doctype:{turn}", "secret:*",
    "!secret", "secret <-> alice", "' OR '1'='1", '") | (*', "=>[KNN 100 @embedding $vector]", "$vector",
    "ismissing(@user_id)", "@user_id:{x616c696365}", "alice|ALICE", "(alice)", "{alice}", "~alice",
    "%s", "%(x)s", "\\", ";", "--", "/*", "*/", "[1 2]", "@occurred_at:[-inf +inf]", "NOT", "OR",
)
SYNTAX = "@|-*(){}[]\"'~%:;\\$^&!<>=,.?/+#`"
TIMES = (
    "2024-01-01T00:00:00Z", "2024-03-05T00:00:00Z", "2024-06-01T00:00:00+02:00", "2025-01-01T00:00:00Z",
    "2025-01-06T12:00:00Z", "1990-01-01T00:00:00Z", "2100-01-01T00:00:00Z",
)
EDGE_IDS = (0, 1, 2**31, 2**63, 10**20)
ROUTES = (
    "GET /whoami", "POST /turns", "POST /memories", "GET /memories", "GET /memories/{id}",
    "DELETE /memories/{id}", "POST /memories/{id}/restore", "POST /memories/{id}/unpack",
    "POST /memories/{id}/anchor", "DELETE /memories/{id}/anchor", "POST /memories/{id}/links",
    "DELETE /memories/{id}/links", "POST /search", "POST /activate", "POST /context", "POST /feedback",
    "POST /forget",
)
#: What is compared of the other tenants' episodes before and after each mutating step.
EPISODE_COLUMNS = (
    "id", "tenant_id", "state", "layer", "anchor", "version", "access_count", "traverse_count",
    "turn_count", "last_accessed_at", "last_linked_at", "stability", "difficulty", "forgotten_at",
    "title", "tags", "metadata", "needs_reindex",
)
BY_ID = {  # action: (method, path suffix)
    "get": ("get", ""), "get_deep": ("get", ""), "delete": ("delete", ""), "restore": ("post", "/restore"),
    "unpack": ("post", "/unpack"), "anchor_post": ("post", "/anchor"), "anchor_delete": ("delete", "/anchor"),
}
# fmt: on


#: A fingerprint of some tenants' episodes and of every link and turn that touches them, whoever
#: wrote it (its six parameters are the same list of tenant ids).
_ROW = ", ".join(f"e.{c}" for c in EPISODE_COLUMNS)
SNAPSHOT_SQL = f"""
SELECT
  (SELECT md5(coalesce(string_agg(concat_ws('|', {_ROW}), ',' ORDER BY e.id), ''))
     FROM episodes_episode e WHERE e.tenant_id::text = ANY(%s)),
  (SELECT md5(coalesce(string_agg(concat_ws('|', l.id, l.tenant_id, l.src_id, l.dst_id, l.kind), ',' ORDER BY l.id), ''))
     FROM episodes_link l JOIN episodes_episode s ON s.id = l.src_id JOIN episodes_episode d ON d.id = l.dst_id
     WHERE l.tenant_id::text = ANY(%s) OR s.tenant_id::text = ANY(%s) OR d.tenant_id::text = ANY(%s)),
  (SELECT count(*) FROM episodes_turn t JOIN episodes_episode e ON e.id = t.episode_id
     WHERE t.tenant_id::text = ANY(%s) OR e.tenant_id::text = ANY(%s))
"""


def tenant_marker(label: str) -> str:
    return f"marker-tenant{label}-{SUFFIX[label]}"


def user_marker(label: str, user: str) -> str:
    """Differs from the other users' markers of its tenant only by letter case."""
    return f"secret-of-{user}-{label}-{SUFFIX[label]}" if user else ""


def scope_value(value: Any) -> str | None:
    """A filter value as the API applies it: DRF trims it, and a blank one does not filter."""
    return (value.strip() or None) if isinstance(value, str) else None


# --- the data -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Facts:
    """What the suite knows of one episode, to check answers against."""

    user_id: str
    agent_id: str
    session_id: str
    kind: str
    layer: str
    anchor: bool


@dataclass
class World:
    """One tenant: its keys, markers and episodes as written, the turn ids and vectors it used."""

    label: str
    writer: Caller
    reader: Caller
    vectors: list[list[float]]
    #: the episodes as written; they are all visible between steps
    originals: dict[int, Facts] = field(default_factory=dict)
    #: the originals and every episode a step wrote (and forgot at once)
    facts: dict[int, Facts] = field(default_factory=dict)
    turn_ids: list[int] = field(default_factory=list)
    fixed_links: set[tuple[int, int, str]] = field(default_factory=set)

    @property
    def tenant(self):
        return self.writer.tenant

    @property
    def marker(self) -> str:
        return tenant_marker(self.label)

    def markers(self) -> list[str]:
        return [self.marker] + [user_marker(self.label, u) for u in NAMED_USERS]

    def text(self, user: str, words: str) -> str:
        """Every turn and memory: the tenant's marker and its user's, then words to search for."""
        return f"{self.marker} {user_marker(self.label, user) or 'someone'} {words}"

    def remember(self, episode_id: int) -> None:
        e = Episode.objects.get(pk=episode_id)
        self.facts[episode_id] = Facts(e.user_id, e.agent_id, e.session_id, e.kind, e.layer, e.anchor)


def build_world(label: str, seed: int) -> World:
    writer = Caller(f"isolation-{label}", embedder="provided")
    reader = Caller(f"isolation-{label}-reader", scopes=("read",), tenant=writer.tenant)
    world = World(label, writer, reader, vectors=unit_vectors(48, seed=seed).tolist())
    vectors = iter(world.vectors)
    conversations: dict[tuple[str, str], int] = {}
    memories: dict[tuple[str, str], int] = {}
    day = 0
    for user in USERS:
        for n, session in enumerate(SESSIONS[user] + ((f"only-{label}",) if user == "alice" else ())):
            day += 1
            start = datetime(2024, 3, day, 10, tzinfo=UTC)
            turns = [
                {
                    "role": role,
                    "text": world.text(
                        user, f"talks about the launch plan and the {session} ledger, turn {i}"
                    ),
                    "occurred_at": (start + timedelta(minutes=i)).isoformat(),
                    "metadata": {"owner": world.marker},
                    "vector": next(vectors),
                }
                for i, role in enumerate(("user", "assistant", "user"))
            ]
            body = {"user_id": user, "agent_id": AGENTS[n % 2], "session_id": session, "turns": turns}
            response = writer.post(f"{API}/turns", body)
            assert response.status_code == 201, response.content
            assert len(set(response.json()["episode_ids"])) == 1, "three turns make one episode"
            conversations[(user, session)] = response.json()["episode_ids"][0]
            world.turn_ids += [t["id"] for t in response.json()["turns"]]
        for n, (kind_pattern, tags, anchor, agent) in enumerate(MEMORIES):
            kind = kind_pattern.format(lower=label.lower())
            body = {
                "text": world.text(user, f"remembers the {kind} about the launch plan, ledger {n}"),
                "user_id": user,
                "agent_id": agent,
                "kind": kind,
                "tags": [t.format(label=label) for t in tags],
                "anchor": anchor,
                "metadata": {"owner": world.marker},
                "occurred_at": datetime(2025, 1, 1 + n + 3 * USERS.index(user), tzinfo=UTC).isoformat(),
                "vector": next(vectors),
            }
            response = writer.post(f"{API}/memories", body)
            assert response.status_code == 201, response.content
            memories[(user, kind)] = response.json()["id"]
    # Warm and cold episodes, so the Postgres tiers answer as well as Redis.
    note = f"note-{label.lower()}"
    for episode_id, layer in (
        (conversations[("alice", "trip-1")], Layer.WARM),
        (conversations[("ALICE", "trip-1")], Layer.COLD),
        (conversations[("Alice", "Desk")], Layer.WARM),
        (conversations[("", "trip-1")], Layer.COLD),
        (memories[("ALICE", "Fact")], Layer.WARM),
        (memories[("", note)], Layer.COLD),
    ):
        episode_pack(
            tenant=world.tenant, episode_id=episode_id, layer=layer, now=timezone.now(), actor="test"
        )
    # Links from one user's memory to another's: an answer scoped to a user must not follow them.
    for src, dst, kind in (
        (memories[("ALICE", "Fact")], memories[("alice", "fact")], "related"),
        (conversations[("alice", "desk")], memories[("Alice", note)], "references"),
    ):
        response = writer.post(f"{API}/memories/{src}/links", {"target_id": dst, "kind": kind})
        assert response.status_code == 201, response.content
    world.fixed_links = set(Link.objects.filter(tenant=world.tenant).values_list("src_id", "dst_id", "kind"))
    for pk in Episode.objects.filter(tenant=world.tenant).values_list("pk", flat=True):
        world.remember(pk)
    world.originals = dict(world.facts)
    return world


# --- requests and checks --------------------------------------------------------------------------
@dataclass
class Sent:
    """A request as a reproducer shows it (vectors by name: "vec:B:3" is tenant B's vector 3)."""

    label: str
    reader: bool
    method: str
    path: str
    body: Any

    def __str__(self) -> str:
        body = "" if self.body is None else " " + json.dumps(self.body, ensure_ascii=True)
        key = "read" if self.reader else "read+write"
        return f"tenant {self.label} ({key} key): {self.method.upper()} {API}{self.path}{body}"


class Suite:
    """Sends the steps, checks every answer, and counts requests, answers checked and violations."""

    def __init__(self, worlds: dict[str, World]):
        self.worlds = worlds
        self.requests = 0
        self.routes: Counter[str] = Counter()
        #: answers that held something to check, by endpoint (the checks are not vacuous)
        self.non_empty: Counter[str] = Counter()
        self.user_scoped_non_empty = 0
        self.violation_count = 0
        self.violations: dict[str, dict[str, str]] = defaultdict(dict)

    # --- plumbing ---------------------------------------------------------------------------------
    def violation(self, kind: str, sent: Sent | str, detail: str = "") -> None:
        self.violation_count += 1
        examples = self.violations[kind]
        if len(examples) < 3:
            examples.setdefault(str(sent), detail[:500])

    def report(self, elapsed: float) -> str:
        lines = [
            f"isolation suite: {self.requests} requests over {len(self.worlds)} tenants, "
            f"{self.violation_count} leaks ({elapsed:.0f}s)"
        ]
        checked = ", ".join(f"{where} {n}" for where, n in sorted(self.non_empty.items()))
        lines.append(
            f"  answers with memories checked: {checked}; scoped to a user: {self.user_scoped_non_empty}"
        )
        for kind, examples in sorted(self.violations.items()):
            lines.append(f"  {kind}:")
            for sent, detail in examples.items():
                lines += [f"    {sent}", f"      -> {detail}"]
        return "\n".join(lines)

    def others(self, world: World) -> list[World]:
        return [w for w in self.worlds.values() if w is not world]

    def resolve(self, body: Any) -> Any:
        if isinstance(body, dict):
            return {k: self.resolve(v) for k, v in body.items()}
        if isinstance(body, list):
            return [self.resolve(v) for v in body]
        if isinstance(body, str) and body.startswith("vec:"):
            _, label, index = body.split(":")
            return self.worlds[label].vectors[int(index)]
        return [0.5, 0.5, 0.5] if body == "bad:short" else body

    def send(self, world: World, method: str, path: str, body: Any = None, *, reader: bool = False):
        """One request, with the checks every answer passes: no 5xx, no other tenant's marker."""
        sent = Sent(world.label, reader, method, path, body)
        caller = world.reader if reader else world.writer
        response = getattr(caller, method)(API + path, self.resolve(body))
        self.requests += 1
        route = " ".join([method.upper(), "/".join("{id}" if p.isdigit() else p for p in path.split("/"))])
        self.routes[route] += 1
        text = response.content.decode()
        if response.status_code >= 500:
            self.violation("5xx", sent, f"{response.status_code}: {text}")
        lowered = text.lower()  # a packed episode's keywords are lower case
        for other in self.others(world):
            if any(marker.lower() in lowered for marker in other.markers()):
                self.violation(f"another tenant's marker in an answer ({route})", sent, text)
        data = json.loads(text) if response.get("Content-Type", "").startswith("application/json") else None
        return sent, response.status_code, data

    def expect(self, sent: Sent, status: int, allowed: set[int], data: Any) -> bool:
        if status not in allowed:
            route = f"{sent.method.upper()} {sent.path.split('?')[0]}"
            self.violation(f"status {status} where {sorted(allowed)} was due", sent, f"{route}: {data}")
            return False
        return True

    def owner_of(self, episode_id: Any) -> str | None:
        for world in self.worlds.values():
            if episode_id in world.facts:
                return world.label
        return None

    def check_ids(self, world: World, sent: Sent, ids: Iterable[Any], where: str) -> None:
        """Episode ids in an answer are the caller's own: never another tenant's nor unknown ones."""
        for episode_id in ids:
            owner = self.owner_of(episode_id)
            if owner != world.label:
                self.violation(f"{where}: an episode of tenant {owner}", sent, f"episode {episode_id}")

    def check_user_scope(
        self, world: World, sent: Sent, user: str | None, ids: list[int], text: str, where: str
    ) -> None:
        """An answer scoped to a user holds only that user's episodes, and no marker of the users
        whose ids differ from it in letter case only."""
        if user is None:
            return
        strangers = [
            (i, world.facts[i].user_id) for i in ids if i in world.facts and world.facts[i].user_id != user
        ]
        if strangers:
            self.violation(
                f"{where}: another user's memory in an answer scoped to one user",
                sent,
                f"scoped to {user!r}, holds episodes (id, user) {strangers}: {text}",
            )
            return
        for other in NAMED_USERS:
            if other != user and user_marker(world.label, other) in text:
                self.violation(
                    f"{where}: another user's marker in an answer scoped to one user",
                    sent,
                    f"scoped to {user!r}, holds {other!r}'s marker: {text}",
                )

    def check_items(self, world, sent, items: list[dict], id_key: str, filters: dict, where: str) -> None:
        """Search hits, activations and list items: own ids, each filter matched exactly (letter
        case, syntax characters and all), the user scope kept."""
        ids = [item[id_key] for item in items]
        self.check_ids(world, sent, ids, where)
        for item in items:
            for name, wanted in filters.items():
                if wanted is None:
                    continue
                value = item["scope"][name] if name in ("user_id", "agent_id", "session_id") else item[name]
                if not (value in wanted if isinstance(wanted, set) else value == wanted):
                    self.violation(
                        f"{where}: filter {name} not matched exactly", sent, f"{wanted!r} -> {item}"
                    )
        self.check_user_scope(
            world, sent, filters["user_id"], ids, json.dumps(items, ensure_ascii=False), where
        )
        if items:
            self.non_empty[where] += 1
            self.user_scoped_non_empty += filters["user_id"] is not None

    @staticmethod
    def scope_filters(body: dict[str, Any]) -> dict[str, Any]:
        return {name: scope_value(body.get(name)) for name in ("user_id", "agent_id", "session_id")}

    # --- the other tenants' data ------------------------------------------------------------------
    def snapshot(self, worlds: Sequence[World], *, redis: bool = False) -> dict[str, Any]:
        """A fingerprint of the tenants' episodes, of every link and turn that touches them (whoever
        wrote it), and with ``redis`` of their hot documents. Postgres computes it: one round trip."""
        ids = [str(w.tenant.pk) for w in worlds]
        with connection.cursor() as cursor:
            cursor.execute(SNAPSHOT_SQL, [ids] * 6)
            episodes, links, turns = cursor.fetchone()
        found = {"episodes": episodes, "links": links, "turns": turns}
        if redis:
            found["redis"] = [
                (hot_store().count(w.tenant.id.hex), hot_store().episode_ids(w.tenant.id.hex)) for w in worlds
            ]
        return found

    def unchanged(self, world: World, before: dict[str, Any], what: str) -> None:
        after = self.snapshot(self.others(world), redis="redis" in before)
        changed = [name for name in before if before[name] != after[name]]
        if changed:
            self.violation("another tenant's data changed", what, f"changed: {changed}")

    # --- undoing the attacker's own changes -------------------------------------------------------
    def reshape(self, world: World, episode_id: int) -> None:
        """Put one of the attacker's episodes back as written: its pin, then its layer."""
        original = world.originals[episode_id]
        if Episode.objects.get(pk=episode_id).anchor != original.anchor:
            method = "post" if original.anchor else "delete"
            sent, status, data = self.send(world, method, f"/memories/{episode_id}/anchor")
            self.expect(sent, status, {200}, data)
        if Episode.objects.get(pk=episode_id).layer != original.layer:
            episode_pack(
                tenant=world.tenant,
                episode_id=episode_id,
                layer=original.layer,
                now=timezone.now(),
                actor="test",
            )

    def restore(self, world: World, ids: Iterable[int]) -> None:
        for episode_id in ids:
            sent, status, data = self.send(world, "post", f"/memories/{episode_id}/restore")
            self.expect(sent, status, {200}, data)

    # --- the steps --------------------------------------------------------------------------------
    def run(self, world: World, step: tuple[str, dict[str, Any]]) -> None:
        op, params = step
        mutating = op not in {"whoami", "search", "activate", "context", "list"}
        before = self.snapshot(self.others(world)) if mutating else None
        getattr(self, f"step_{op}")(world, **params)
        if before is not None:
            self.unchanged(world, before, f"tenant {world.label}: step {op} {params}")

    def step_whoami(self, world: World, reader: bool) -> None:
        sent, status, data = self.send(world, "get", "/whoami", reader=reader)
        if self.expect(sent, status, {200}, data) and data["tenant"] != world.tenant.name:
            self.violation("whoami names another tenant", sent, str(data))

    def step_by_id(self, world: World, action: str, episode_id: int, reader: bool) -> None:
        own = episode_id in world.originals
        method, suffix = BY_ID[action]
        if action == "get_deep":
            # A write key's deep read unpacks a packed episode: its own are read with the read key.
            reader = reader or own
        query = {"depth": "deep"} if action == "get_deep" else None
        sent, status, data = self.send(world, method, f"/memories/{episode_id}{suffix}", query, reader=reader)
        if reader and method != "get":
            self.expect(sent, status, {403}, data)
        elif action == "restore" and episode_id in world.facts and not own:
            # One the suite wrote and forgot (its id drawn as a turn id): back, then forgotten again.
            if self.expect(sent, status, {200}, data):
                sent, status, data = self.send(world, "delete", f"/memories/{episode_id}")
                self.expect(sent, status, {200}, data)
        elif not own:
            if self.expect(sent, status, {404}, data) and data["error"]["code"] != "not_found":
                self.violation("another tenant's id answered without not_found", sent, str(data))
        elif action == "restore":
            self.expect(sent, status, {409}, data)  # not forgotten
        elif self.expect(sent, status, {200}, data):
            if action == "delete":
                self.restore(world, [episode_id])
                return
            self.non_empty[action] += 1
            links = data.get("links") or {"out": [], "in": []}
            self.check_ids(
                world, sent, [data["id"]] + [x["episode_id"] for x in links["out"] + links["in"]], action
            )
            if action in ("unpack", "anchor_post", "anchor_delete"):
                self.reshape(world, episode_id)

    def step_links(self, world: World, method: str, source: int, target: int, kind: str | None) -> None:
        body = {"target_id": target} | ({"kind": kind} if kind else {})
        sent, status, data = self.send(world, method, f"/memories/{source}/links", body)
        own = source in world.originals and target in world.originals
        if target < 1:
            self.expect(sent, status, {400}, data)
        elif method == "post" and source == target:
            self.expect(sent, status, {400, 409}, data)  # a request that contradicts itself
        elif not own:
            self.expect(sent, status, {404}, data)
        elif method == "post":
            if self.expect(sent, status, {200, 201}, data):
                self.check_ids(world, sent, [data["source_id"], data["target_id"]], "links")
                if status == 201:  # a link the data does not hold: take that one away again
                    undo = {"target_id": target, "kind": kind or LinkKind.RELATED}
                    sent, status, data = self.send(world, "delete", f"/memories/{source}/links", undo)
                    self.expect(sent, status, {200}, data)
        else:
            fixed = [k for s, d, k in world.fixed_links if (s, d) == (source, target) and kind in (None, k)]
            if self.expect(sent, status, {200} if fixed else {404}, data):
                for fixed_kind in fixed:  # one of the data's links: put it back
                    again = {"target_id": target, "kind": fixed_kind}
                    sent, status, data = self.send(world, "post", f"/memories/{source}/links", again)
                    self.expect(sent, status, {201}, data)

    def step_feedback(self, world: World, used: list[int], unused: list[int], reader: bool) -> None:
        sent, status, data = self.send(
            world, "post", "/feedback", {"used": used, "unused": unused}, reader=reader
        )
        if reader:
            self.expect(sent, status, {403}, data)
        elif not (used or unused) or min(used + unused) < 1:
            self.expect(sent, status, {400}, data)
        elif set(used) & set(unused):
            self.expect(sent, status, {400, 409}, data)  # a request that contradicts itself
        else:
            self.expect(sent, status, {200} if set(used + unused) <= set(world.originals) else {404}, data)

    def step_search(self, world: World, body: dict[str, Any]) -> None:
        # A deep search with a write key unpacks its hits: the read key keeps the layers as written.
        sent, status, data = self.send(world, "post", "/search", body, reader=body.get("depth") == "deep")
        if self.expect(sent, status, {200, 400}, data) and status == 200:
            filters = self.scope_filters(body) | {
                "kind": {k.strip() for k in body["kinds"]} if body.get("kinds") else None,
                "layer": set(body.get("layers") or ("hot", "warm", "cold")),
                "state": {"active", "dormant"} if body.get("include_dormant") else {"active"},
            }
            self.check_items(world, sent, data["results"], "episode_id", filters, "search")

    def step_activate(self, world: World, body: dict[str, Any]) -> None:
        sent, status, data = self.send(world, "post", "/activate", body)
        if self.expect(sent, status, {200, 400}, data) and status == 200:
            filters = self.scope_filters(body) | {"kind": body["kind"].strip(), "state": "active"}
            self.check_items(world, sent, data["results"], "episode_id", filters, "activate")

    def step_list(self, world: World, params: dict[str, Any], reader: bool) -> None:
        sent, status, data = self.send(world, "get", "/memories", params, reader=reader)
        if self.expect(sent, status, {200, 400}, data) and status == 200:
            anchor = {"true": True, "false": False}.get(params.get("anchor", ""))
            filters = self.scope_filters(params) | {
                "kind": scope_value(params.get("kind")),
                "layer": params.get("layer"),
                "state": params.get("state") or {"active", "dormant", "delete_candidate"},
                "anchor": anchor,
            }
            self.check_items(world, sent, data["results"], "id", filters, "memory list")

    def step_context(self, world: World, body: dict[str, Any]) -> None:
        sent, status, data = self.send(world, "post", "/context", body)
        if not (self.expect(sent, status, {200, 400}, data) and status == 200):
            return
        user = scope_value(body.get("user_id"))
        for section, items in data["sections"].items():
            ids = [item["episode_id"] for item in items]
            self.check_ids(world, sent, ids, f"context ({section})")
            text = json.dumps(items, ensure_ascii=False)
            self.check_user_scope(world, sent, user, ids, text, f"context ({section})")
        if data["text"]:
            self.non_empty["context"] += 1
            self.user_scoped_non_empty += user is not None

    def step_forget(self, world: World, body: dict[str, Any], reader: bool) -> None:
        sent, status, data = self.send(world, "post", "/forget", body, reader=reader)
        if reader:
            self.expect(sent, status, {403}, data)
            return
        if not (self.expect(sent, status, {200, 400}, data) and status == 200):
            return
        self.check_ids(world, sent, data["ids"], "forget")
        wanted = self.scope_filters(body) | {"kind": scope_value(body.get("kind"))}
        chosen = [world.facts[i] for i in data["ids"] if i in world.facts]
        for name, value in wanted.items():
            if value is not None and any(getattr(facts, name) != value for facts in chosen):
                self.violation(f"forget: filter {name} not matched exactly", sent, f"{value!r} -> {chosen}")
        self.check_user_scope(world, sent, wanted["user_id"], data["ids"], "", "forget")
        self.non_empty["forget"] += bool(data["ids"])
        if not body["dry_run"]:
            self.restore(world, data["ids"])

    def step_write_memory(self, world: World, body: dict[str, Any], extra: dict[str, Any]) -> None:
        user = scope_value(body.get("user_id")) or ""
        text = world.text(user if user in NAMED_USERS else "", "writes a new note about the launch plan")
        sent, status, data = self.send(
            world, "post", "/memories", {"text": text, "vector": f"vec:{world.label}:0", **body, **extra}
        )
        if extra:  # a field naming a tenant, or anything else unknown, is refused
            self.expect(sent, status, {400}, data)
        elif self.expect(sent, status, {201, 400}, data) and status == 201:
            self.written(world, sent, [data["id"]])

    def step_write_turns(self, world: World, body: dict[str, Any]) -> None:
        user = scope_value(body.get("user_id")) or ""
        text = world.text(user if user in NAMED_USERS else "", "adds a turn about the launch plan")
        turns = [{"role": "user", "text": text, "vector": f"vec:{world.label}:{i}"} for i in range(2)]
        sent, status, data = self.send(world, "post", "/turns", {**body, "turns": turns})
        if self.expect(sent, status, {201, 400}, data) and status == 201:
            self.written(world, sent, data["episode_ids"])

    def written(self, world: World, sent: Sent, episode_ids: list[int]) -> None:
        """A write opens a new episode of the writer (the data's conversations are older than the
        segmentation gap, and another tenant's are never joined); it is forgotten at once, so the
        data stays as written."""
        for episode_id in dict.fromkeys(episode_ids):
            owner = self.owner_of(episode_id)
            if owner is not None:
                self.violation(f"a write joined an episode of tenant {owner}", sent, f"episode {episode_id}")
                continue
            if not Episode.objects.filter(pk=episode_id, tenant=world.tenant).exists():
                self.violation("a write landed outside its tenant", sent, f"episode {episode_id}")
                continue
            world.remember(episode_id)
            forgot, status, data = self.send(world, "delete", f"/memories/{episode_id}")
            self.expect(forgot, status, {200}, data)


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
    episode_ids = sorted(i for w in worlds.values() for i in w.originals)
    turn_ids = sorted(i for w in worlds.values() for i in w.turn_ids)
    some_episode = st.sampled_from(episode_ids)
    any_id = st.one_of(some_episode, st.sampled_from(turn_ids), st.sampled_from(EDGE_IDS))
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
            "include_dormant": (st.booleans(), 4),
            "explain": (st.booleans(), 4),
        }
    ).map(search_body)
    search = sometimes_invalid(
        search,
        [
            {"layers": ["HOT"]}, {"layers": []}, {"limit": 0}, {"limit": 101}, {"vector": "bad:short"},
            {"query": "secret\x00alice"}, {"occurred_from": "yesterday"}, {"occurred_to": "2024-13-01"},
            {"depth": "deeper"}, {"kinds": "fact"}, {"user_id": ["alice"]}, tenant_field, {"tenant_id": hexes[1]},
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
            "cursor": (any_id.map(encode_cursor), 5),
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


# --- the test -------------------------------------------------------------------------------------
def as_written(world: World) -> dict[int, tuple[str, str, bool]]:
    """State, layer and pin of the tenant's episodes as written."""
    rows = Episode.objects.filter(pk__in=list(world.originals)).values_list("pk", "state", "layer", "anchor")
    return {pk: (state, layer, anchor) for pk, state, layer, anchor in rows}


def test_no_tenant_or_user_sees_another(caplog, capsys):
    # 404s and 400s are the point here: a warning for each would only slow the run down.
    caplog.set_level(logging.ERROR, logger="django.request")
    started = time.perf_counter()
    worlds = {label: build_world(label, seed=n + 1) for n, label in enumerate(LABELS)}
    for world in worlds.values():
        assert {f.layer for f in world.originals.values()} == {"hot", "warm", "cold"}
    written = {label: as_written(world) for label, world in worlds.items()}
    suite = Suite(worlds)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(
        attacker=st.sampled_from(LABELS),
        batch=st.lists(steps(worlds), min_size=STEPS_PER_EXAMPLE, max_size=STEPS_PER_EXAMPLE),
    )
    def attack(attacker: str, batch: list[tuple[str, dict[str, Any]]]) -> None:
        world = worlds[attacker]
        before = suite.snapshot(suite.others(world), redis=True)
        for one in batch:
            suite.run(world, one)
        # Searches queue their usage counts, written later: write them now, then compare.
        recorder.flush()
        suite.unchanged(world, before, f"tenant {attacker}: the usage counts of {batch}")

    attack()

    report = suite.report(time.perf_counter() - started)
    with capsys.disabled():
        print("\n" + report)
    assert suite.requests >= MIN_REQUESTS, report
    rare = {route: suite.routes[route] for route in ROUTES if suite.routes[route] < 100}
    assert not rare, f"endpoints barely exercised: {rare}"
    # The checks had answers to check, user-scoped ones included.
    for where in ("search", "context", "memory list", "activate", "forget"):
        assert suite.non_empty[where] >= 40, (where, suite.non_empty)
    for action in ("get", "get_deep", "unpack", "anchor_post", "anchor_delete"):
        assert suite.non_empty[action] >= 5, (action, suite.non_empty)
    assert suite.user_scoped_non_empty >= 300, suite.user_scoped_non_empty
    for label, world in worlds.items():
        assert as_written(world) == written[label], f"tenant {label}'s episodes are not as written\n{report}"
        assert_consistent(world.tenant)  # Postgres and Redis agree, tenant by tenant
    assert not suite.violations, report
