"""The isolation suite's requests and the checks of every answer."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.utils import timezone

from episodes.models import Episode, LinkKind
from episodes.stores.hot import hot_store
from lifecycle.services import episode_pack

from .world import API, BY_ID, NAMED_USERS, SNAPSHOT_SQL, World, scope_value, user_marker, valid_id


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
        parts = path.split("?")[0].split("/")
        if len(parts) > 2 and parts[1] == "memories":
            parts[2] = "{id}"
        route = " ".join([method.upper(), "/".join(parts)])
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

    def canonical(self, reference: Any) -> Any:
        """The public id of the episode a reference (a public id in either case, or an old integer
        id) names, if the data has one; else the reference itself."""
        if isinstance(reference, int):
            for world in self.worlds.values():
                for public_id, pk in world.pks.items():
                    if pk == reference:
                        return public_id
            return reference
        return reference.upper()

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
                if name in ("user_id", "agent_id", "session_id"):
                    if "scope" not in item:
                        continue  # a compact search hit (its text is checked below)
                    value = item["scope"][name]
                else:
                    value = item[name]
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
    def reshape(self, world: World, episode_id: str) -> None:
        """Put one of the attacker's episodes back as written: its pin, then its layer."""
        original, pk = world.originals[episode_id], world.pks[episode_id]
        if Episode.objects.across_tenants("test").get(pk=pk).anchor != original.anchor:
            method = "post" if original.anchor else "delete"
            sent, status, data = self.send(world, method, f"/memories/{episode_id}/anchor")
            self.expect(sent, status, {200}, data)
        if Episode.objects.across_tenants("test").get(pk=pk).layer != original.layer:
            episode_pack(
                tenant=world.tenant,
                episode_id=pk,
                layer=original.layer,
                now=timezone.now(),
                actor="test",
            )

    def restore(self, world: World, ids: Iterable[Any]) -> None:
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

    def step_by_id(self, world: World, action: str, episode_id: Any, reader: bool) -> None:
        named = self.canonical(episode_id)
        own = named in world.originals
        method, suffix = BY_ID[action]
        if action == "get_deep":
            # A write key's deep read unpacks a packed episode: its own are read with the read key.
            reader = reader or own
        query = {"depth": "deep"} if action == "get_deep" else None
        sent, status, data = self.send(world, method, f"/memories/{episode_id}{suffix}", query, reader=reader)
        if not valid_id(episode_id):  # no route
            if self.expect(sent, status, {404}, data) and data["error"]["code"] != "not_found":
                self.violation("an invalid id answered without not_found", sent, str(data))
        elif reader and method != "get":
            self.expect(sent, status, {403}, data)
        elif action == "restore" and named in world.facts and not own:
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
                self.reshape(world, named)

    def step_links(self, world: World, method: str, source: Any, target: Any, kind: str | None) -> None:
        body = {"target_id": target} | ({"kind": kind} if kind else {})
        sent, status, data = self.send(world, method, f"/memories/{source}/links", body)
        source, target = self.canonical(source), self.canonical(target)
        own = source in world.originals and target in world.originals
        if not valid_id(source):  # no route
            self.expect(sent, status, {404}, data)
        elif not valid_id(target):
            self.expect(sent, status, {400}, data)
        elif method == "post" and source == target and source in world.facts:
            # A request that contradicts itself, whether the memory is forgotten (one the suite
            # wrote, named by its old integer id drawn as a turn's) or not.
            self.expect(sent, status, {409}, data)
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

    def step_feedback(self, world: World, used: list[Any], unused: list[Any], reader: bool) -> None:
        sent, status, data = self.send(
            world, "post", "/feedback", {"used": used, "unused": unused}, reader=reader
        )
        used, unused = [self.canonical(i) for i in used], [self.canonical(i) for i in unused]
        if reader:
            self.expect(sent, status, {403}, data)
        elif not (used or unused) or not all(valid_id(i) for i in used + unused):
            self.expect(sent, status, {400}, data)
        elif not set(used + unused) <= set(world.facts):
            self.expect(sent, status, {404}, data)
        elif set(used) & set(unused):
            self.expect(sent, status, {409}, data)  # forgotten or not: the request contradicts itself
        else:
            self.expect(sent, status, {200} if set(used + unused) <= set(world.originals) else {404}, data)

    def step_search(self, world: World, body: dict[str, Any]) -> None:
        # A deep search with a write key unpacks its hits: the read key keeps the layers as written.
        sent, status, data = self.send(world, "post", "/search", body, reader=body.get("depth") == "deep")
        if self.expect(sent, status, {200, 400}, data) and status == 200:
            states = (
                {"active"}
                if body.get("include_dormant") is False
                else {"active", "dormant", "delete_candidate"}
            )
            filters = self.scope_filters(body) | {
                "kind": {k.strip() for k in body["kinds"]} if body.get("kinds") else None,
                "layer": set(body.get("layers") or ("hot", "warm", "cold")),
                "state": states,
            }
            if body.get("view") != "full":
                # A compact hit names its layer, and its state when it is not active; its scope and
                # kind are the full view's (the same hits). Its text is checked for others' words.
                filters = {"user_id": filters["user_id"], "layer": filters["layer"]}
                for item in data["results"]:
                    if item.get("state", "active") not in states:
                        self.violation("search: filter state not matched exactly", sent, str(item))
            self.check_items(world, sent, data["results"], "episode_id", filters, "search")

    def step_activate(self, world: World, body: dict[str, Any]) -> None:
        sent, status, data = self.send(world, "post", "/activate", body)
        if self.expect(sent, status, {200, 400}, data) and status == 200:
            filters = self.scope_filters(body) | {"kind": body["kind"].strip(), "state": "active"}
            self.check_items(world, sent, data["results"], "episode_id", filters, "activate")

    def step_list(self, world: World, params: dict[str, Any], reader: bool) -> None:
        sent, status, data = self.send(world, "get", "/memories", params, reader=reader)
        # A cursor naming no memory of the caller's is a 404 (one of another tenant's included).
        cursor = params.get("cursor")
        foreign = (
            cursor is not None
            and self.canonical(int(cursor) if cursor.isdigit() else cursor) not in world.facts
        )
        if self.expect(sent, status, {200, 400, 404} if foreign else {200, 400}, data) and status == 200:
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

    def written(self, world: World, sent: Sent, episode_ids: list[str]) -> None:
        """A write opens a new episode of the writer (the data's conversations are older than the
        segmentation gap, and another tenant's are never joined); it is forgotten at once, so the
        data stays as written."""
        for episode_id in dict.fromkeys(episode_ids):
            owner = self.owner_of(episode_id)
            if owner is not None:
                self.violation(f"a write joined an episode of tenant {owner}", sent, f"episode {episode_id}")
                continue
            if (
                not Episode.objects.across_tenants("test")
                .filter(public_id=episode_id, tenant=world.tenant)
                .exists()
            ):
                self.violation("a write landed outside its tenant", sent, f"episode {episode_id}")
                continue
            world.remember(episode_id)
            forgot, status, data = self.send(world, "delete", f"/memories/{episode_id}")
            self.expect(forgot, status, {200}, data)
