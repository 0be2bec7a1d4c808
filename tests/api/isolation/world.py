"""The isolation suite's data: three tenants, their users, markers and episodes as written."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from episodes.models import Episode, Layer, Link, Turn
from lifecycle.services import episode_pack
from tests.conftest import Caller, unit_vectors

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
#: Ids no episode has: integers out of range (old integer ids are still accepted), a public id's
#: extremes, one with a letter base32 leaves out (O), one with a first character out of range.
EDGE_IDS = (
    0, 1, 2**31, 2**63, 10**20, "00000000000000000000000000", "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
    "0000000000000000000000000O", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ", "01",
)
#: A public id (a ULID, read in either case) and an old integer id, as the API documents them.
PUBLIC_ID = re.compile("[0-7][0-9A-HJKMNP-TV-Z]{25}", re.IGNORECASE)


def valid_id(reference: Any) -> bool:
    """Whether a path or body may name an episode so (whether one has it or not)."""
    if isinstance(reference, bool):
        return False
    if isinstance(reference, int):
        return 1 <= reference < 10**18
    return bool(PUBLIC_ID.fullmatch(reference))
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
    #: the episodes as written, by public id; they are all visible between steps
    originals: dict[str, Facts] = field(default_factory=dict)
    #: the originals and every episode a step wrote (and forgot at once)
    facts: dict[str, Facts] = field(default_factory=dict)
    #: the internal (old integer) id of each of them
    pks: dict[str, int] = field(default_factory=dict)
    turn_ids: list[str] = field(default_factory=list)
    turn_pks: list[int] = field(default_factory=list)
    fixed_links: set[tuple[str, str, str]] = field(default_factory=set)

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

    def remember(self, public_id: str) -> None:
        e = Episode.objects.across_tenants("test").get(tenant=self.tenant, public_id=public_id)
        self.facts[public_id] = Facts(e.user_id, e.agent_id, e.session_id, e.kind, e.layer, e.anchor)
        self.pks[public_id] = e.pk


def build_world(label: str, seed: int) -> World:
    writer = Caller(f"isolation-{label}", embedder="provided")
    reader = Caller(f"isolation-{label}-reader", scopes=("read",), tenant=writer.tenant)
    world = World(label, writer, reader, vectors=unit_vectors(48, seed=seed).tolist())
    vectors = iter(world.vectors)
    conversations: dict[tuple[str, str], str] = {}
    memories: dict[tuple[str, str], str] = {}
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
        pk = Episode.objects.across_tenants("test").get(tenant=world.tenant, public_id=episode_id).pk
        episode_pack(tenant=world.tenant, episode_id=pk, layer=layer, now=timezone.now(), actor="test")
    # Links from one user's memory to another's: an answer scoped to a user must not follow them.
    for src, dst, kind in (
        (memories[("ALICE", "Fact")], memories[("alice", "fact")], "related"),
        (conversations[("alice", "desk")], memories[("Alice", note)], "references"),
    ):
        response = writer.post(f"{API}/memories/{src}/links", {"target_id": dst, "kind": kind})
        assert response.status_code == 201, response.content
    links = Link.objects.across_tenants("test").filter(tenant=world.tenant)
    world.fixed_links = set(links.values_list("src__public_id", "dst__public_id", "kind"))
    # In the order they were written: the steps draw ids by their place in these lists.
    for public_id in (
        Episode.objects.across_tenants("test")
        .filter(tenant=world.tenant)
        .order_by("pk")
        .values_list("public_id", flat=True)
    ):
        world.remember(public_id)
    world.originals = dict(world.facts)
    world.turn_pks = list(
        Turn.objects.across_tenants("test")
        .filter(tenant=world.tenant)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return world


def as_written(world: World) -> dict[str, tuple[str, str, bool]]:
    """State, layer and pin of the tenant's episodes as written."""
    rows = Episode.objects.across_tenants("test").filter(
        tenant=world.tenant, public_id__in=list(world.originals)
    )
    return {
        p: (state, layer, anchor)
        for p, state, layer, anchor in rows.values_list("public_id", "state", "layer", "anchor")
    }
