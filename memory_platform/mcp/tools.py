"""The five tools: ``remember``, ``recall``, ``context``, ``forget``, ``unpack``.

Each is a thin mapping onto the REST API (``dispatch``); what the API refuses comes back to the
model as a tool error carrying the API's own message, so it can correct the call. ``caller``
says, for one tool call, who is calling: the transport decides it, never an argument.
"""

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from episodes import public_ids

from .dispatch import ApiError, Caller

INSTRUCTIONS = (
    "Long-term memory for this agent's team. Call `remember` with the turns of a conversation "
    "(or a single fact) worth keeping; call `recall` with a question to find what was said or "
    "decided before, in any age of memory; call `context` at the start of a task for a prompt-ready "
    "summary of what matters now. Old memories come back compressed: `unpack` one by its id to read "
    "it whole. `forget` removes a memory (restorable for a while)."
)

Scope = Annotated[
    str | None,
    Field(description="Limit to one person / agent / conversation, by the id you stored it under."),
]
MemoryId = Annotated[
    str,
    Field(
        description="A memory's id: `episode_id` in `recall` and `context` results, or one of `remember`'s `memory_ids`.",
        # Said to the model, and checked by ``_memory_path`` with a message it can act on.
        json_schema_extra={"pattern": f"^{public_ids.REFERENCE}$"},
    ),
]


class TurnIn(BaseModel):
    role: Literal["user", "assistant", "system", "tool"] = Field(description="Who spoke.")
    text: str = Field(description="What was said, verbatim.")
    occurred_at: datetime | None = Field(
        default=None, description="When it was said (ISO 8601); now when left out."
    )


async def _api(caller: Caller, method: str, path: str, body: Any = None) -> Any:
    try:
        return await caller.request(method, path, body)
    except ApiError as exc:
        raise ToolError(f"the memory platform refused: {exc}") from None


def _memory_path(memory_id: str, operation: str = "") -> str:
    """The API path of one memory's ``operation``. The id is read as an id first: pasted into the
    path as it came, ``<id>/anchor`` would name another operation (unpinning, for ``forget``)."""
    try:
        reference = public_ids.parse(memory_id)
    except ValueError:
        raise ToolError(
            f"`memory_id` {memory_id[:60]!r} is not a memory's id: give an `episode_id` from `recall` or "
            "`context`, or one of `remember`'s `memory_ids` (26 letters and digits); nothing was done"
        ) from None
    return f"/memories/{reference}{operation}"


def _clean(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v not in (None, [], "")}


def build_server(caller: Callable[[Context], Caller]) -> MCPServer:
    """The MCP server; ``caller(ctx)`` names who makes one tool call."""
    server = MCPServer("memory-platform", instructions=INSTRUCTIONS)

    @server.tool(annotations=ToolAnnotations(title="Remember", destructive_hint=False))
    async def remember(
        ctx: Context,
        turns: Annotated[
            list[TurnIn] | None,
            Field(description="Turns of one conversation, in order. Give these, or `fact`."),
        ] = None,
        fact: Annotated[
            str | None,
            Field(description="One fact, preference or decision to keep, as a sentence. Or `turns`."),
        ] = None,
        session_id: Annotated[
            str | None, Field(description="The conversation the turns belong to (required with turns).")
        ] = None,
        user_id: Scope = None,
        agent_id: Scope = None,
        tags: Annotated[list[str] | None, Field(description="Labels for a fact, to filter by.")] = None,
    ) -> dict[str, Any]:
        """Store turns of a conversation, or one fact, in long-term memory. Turns are grouped into
        memories (episodes) by conversation; the answer names them. Stored for good before it answers."""
        if (turns is None) == (fact is None):
            raise ToolError("give either `turns` (a conversation) or `fact` (one sentence), not both")
        who = caller(ctx)
        if fact is not None:
            body = _clean(
                {
                    "text": fact,
                    "tags": tags,
                    "user_id": user_id,
                    "agent_id": agent_id,
                    "session_id": session_id,
                }
            )
            memory = await _api(who, "POST", "/memories", body)
            return {"memory_id": memory["id"], "layer": memory.get("layer"), "kind": memory.get("kind")}
        if not session_id:
            raise ToolError("`session_id` is required with `turns`: the conversation they belong to")
        assert turns is not None
        body = _clean({"session_id": session_id, "user_id": user_id, "agent_id": agent_id})
        body["turns"] = [t.model_dump(exclude_none=True, mode="json") for t in turns]
        written = await _api(who, "POST", "/turns", body)
        return {
            "memory_ids": written["episode_ids"],
            "turn_ids": [t["id"] for t in written["turns"]],
            "searchable": written["searchable"],
        }

    @server.tool(annotations=ToolAnnotations(title="Recall", read_only_hint=True))
    async def recall(
        ctx: Context,
        query: Annotated[str, Field(description="What to look for: a question or keywords.")],
        limit: Annotated[int, Field(ge=1, le=50, description="How many memories at most.")] = 5,
        user_id: Scope = None,
        agent_id: Scope = None,
        session_id: Scope = None,
        since: Annotated[
            datetime | None, Field(description="Only what happened from then (ISO 8601).")
        ] = None,
        until: Annotated[
            datetime | None, Field(description="Only what happened until then (ISO 8601).")
        ] = None,
    ) -> dict[str, Any]:
        """Search long-term memory, recent and old, by meaning and by words. Each result is a
        memory's matching text with its id, date, layer (hot: whole; warm, cold: compressed, which
        `unpack` restores) and score, best first."""
        body = _clean(
            {
                "query": query,
                "limit": limit,
                "user_id": user_id,
                "agent_id": agent_id,
                "session_id": session_id,
                "occurred_from": since,
                "occurred_to": until,
            }
        )
        found = await _api(caller(ctx), "POST", "/search", body)
        return {"results": found["results"], "degraded": found.get("degraded", False)}

    @server.tool(annotations=ToolAnnotations(title="Context", read_only_hint=True))
    async def context(
        ctx: Context,
        query: Annotated[str, Field(description="The task or question at hand.")] = "",
        session_id: Annotated[
            str | None, Field(description="The current conversation: its latest turns come first.")
        ] = None,
        user_id: Scope = None,
        agent_id: Scope = None,
        max_tokens: Annotated[
            int, Field(ge=50, le=200_000, description="Budget for the whole answer.")
        ] = 2000,
        ids: Annotated[
            bool,
            Field(
                description="Also name each memory by its id and score in the text (to `unpack` or "
                "`forget` one); they count against the budget."
            ),
        ] = False,
    ) -> str:
        """Prompt-ready context within a token budget, as text: pinned memories, the current
        conversation's latest turns, and the turns most relevant to the query, whatever their age,
        each memory under its date."""
        body = _clean(
            {
                "query": query,
                "session_id": session_id,
                "user_id": user_id,
                "agent_id": agent_id,
                "max_tokens": max_tokens,
            }
        )
        return str((await _api(caller(ctx), "POST", "/context", {**body, "ids": ids}))["text"])

    @server.tool(annotations=ToolAnnotations(title="Forget", destructive_hint=True, idempotent_hint=True))
    async def forget(ctx: Context, memory_id: MemoryId) -> dict[str, Any]:
        """Forget one memory: it is no longer found. An operator can restore it during the
        tenant's grace period; after that it is deleted."""
        return await _api(caller(ctx), "DELETE", _memory_path(memory_id))

    @server.tool(annotations=ToolAnnotations(title="Unpack", idempotent_hint=True))
    async def unpack(ctx: Context, memory_id: MemoryId) -> dict[str, Any]:
        """Read a compressed (warm or cold) memory whole: every turn, restored to hot and current
        again. A hot memory is returned as it is."""
        return await _api(caller(ctx), "POST", _memory_path(memory_id, "/unpack"))

    return server
