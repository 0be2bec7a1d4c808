"""How a LangGraph item is kept in one of the platform's memories, and how LangGraph's filters and
namespace conditions read: the tags that address it, the record its metadata holds, the rules a
namespace must keep. No I/O: ``langgraph_store`` sends the calls."""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    InvalidNamespaceError,
    Item,
    MatchCondition,
    Op,
    PutOp,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

SCOPE_FIELDS = ("user_id", "agent_id", "session_id")
#: The metadata key that holds an item.
META = "langgraph"
#: A memory holds at most 50 tags of at most 100 characters: one per namespace prefix, one the key's.
TAG_CHARS, MAX_TAGS = 100, 50


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def namespace_tag(prefix: tuple[str, ...]) -> str:
    """The tag every item under ``prefix`` holds."""
    dotted = ".".join(prefix)
    tag = f"langgraph:ns:{dotted}"
    return tag if len(tag) <= TAG_CHARS else f"langgraph:ns#{_digest(dotted)}"


def item_tag(namespace: tuple[str, ...], key: str) -> str:
    """The tag of one item (a key may hold any character, so it is always hashed)."""
    return f"langgraph:item#{_digest(json.dumps([list(namespace), key]))}"


@dataclass(frozen=True)
class Record:
    """An item as its memory holds it."""

    memory_id: str
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    indexed: bool

    @classmethod
    def of(cls, memory: Mapping[str, Any]) -> Record | None:
        """The item of a memory (as GET /memories shows one); None when the store did not write it."""
        mine = (memory.get("metadata") or {}).get(META)
        if not isinstance(mine, dict) or not isinstance(mine.get("value"), dict):
            return None
        # The platform's clock: the memory was written when the item was last put.
        updated = datetime.fromisoformat(memory["first_occurred_at"])
        created = mine.get("created_at")
        return cls(
            memory_id=memory["id"],
            namespace=tuple(mine["namespace"]),
            key=str(mine["key"]),
            value=mine["value"],
            created_at=datetime.fromisoformat(created) if created else updated,
            updated_at=updated,
            indexed=bool(mine.get("indexed", True)),
        )

    def item(self) -> Item:
        return Item(
            value=self.value,
            key=self.key,
            namespace=self.namespace,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )

    def search_item(self, score: float | None = None) -> SearchItem:
        return SearchItem(self.namespace, self.key, self.value, self.created_at, self.updated_at, score)


# --- filters and match conditions, as LangGraph documents them ----------------------------------------
def _ordered(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    """An ordering that holds between two numbers or two strings only (a missing field is never
    greater or smaller than anything)."""

    def check(have: Any, want: Any) -> bool:
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (have, want))
        strings = isinstance(have, str) and isinstance(want, str)
        return (numbers or strings) and compare(have, want)

    return check


OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": operator.eq,
    "$ne": operator.ne,
    "$gt": _ordered(operator.gt),
    "$gte": _ordered(operator.ge),
    "$lt": _ordered(operator.lt),
    "$lte": _ordered(operator.le),
}


def _compare(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        if any(k.startswith("$") for k in want):
            unknown = sorted(set(want) - set(OPERATORS))
            if unknown:
                raise ValueError(f"unsupported filter operators {unknown}; use {sorted(OPERATORS)}")
            return all(OPERATORS[op](have, arg) for op, arg in want.items())
        return isinstance(have, dict) and all(_compare(have.get(k), v) for k, v in want.items())
    if isinstance(want, list | tuple):
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(_compare(h, w) for h, w in zip(have, want, strict=True))
        )
    return bool(have == want)


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether a value passes a search's ``filter``."""
    return all(_compare(value.get(k), want) for k, want in (filter or {}).items())


def matches_condition(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    labels = (
        namespace[: len(path)]
        if condition.match_type == "prefix"
        else namespace[len(namespace) - len(path) :]
    )
    return all(p in ("*", n) for p, n in zip(path, labels, strict=True))


def fixed_prefix(conditions: Sequence[MatchCondition]) -> tuple[str, ...]:
    """The longest prefix every namespace the conditions keep starts with (up to a wildcard)."""
    longest: tuple[str, ...] = ()
    for condition in conditions:
        if condition.match_type != "prefix":
            continue
        labels = tuple(condition.path)
        fixed = labels[: labels.index("*")] if "*" in labels else labels
        longest = max(longest, fixed, key=len)
    return longest


# --- what a put writes ----------------------------------------------------------------------------------
def strings_of(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in strings_of(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in strings_of(v)]
    return []


def check_op(op: Op) -> None:
    """LangGraph's rules for namespaces (its ``put`` checks more than ``batch`` does), and ours."""
    validate_op_namespace(op)  # labels: strings, not empty, no dot, no NUL
    if isinstance(op, PutOp) and op.value is not None:
        if not op.namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if op.namespace[0] == "langgraph":
            raise InvalidNamespaceError(
                f'Root label for namespace cannot be "langgraph". Got: {op.namespace}'
            )
    namespace = op.namespace_prefix if isinstance(op, SearchOp) else getattr(op, "namespace", ())
    if len(namespace) >= MAX_TAGS:
        raise InvalidNamespaceError(
            f"a namespace has at most {MAX_TAGS - 1} labels here (a memory's tags name each prefix)"
        )
