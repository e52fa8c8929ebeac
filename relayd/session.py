"""One operation run for an agent's session, with the session's bookkeeping around it.

relay-mcp does the same around every tool call: refresh the agent's last-seen before the
operation (seed 002: a tool call is a sign of life) and tell the model afterwards how many
messages are waiting. `session_call` does all three in one request, through relayd or
directly on the store alike, instead of three round trips per tool call.

What it does not wrap: an operation a bridged relayd decides team-wide (`TEAM_DECIDED`:
register, reserve, release) travels on its own, so the bridge still decides it; and an
unknown agent is reported (UnknownAgent for `agent`, before anything ran), so the caller
registers it with a `register` request of its own and asks again.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .agents import TouchParams, touch
from .errors import UsageError
from .inbox.read import UnreadParams, unread
from .registry import TEAM_DECIDED, operation
from .store import Store


class SessionCallParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str  # whose session this is
    op: str  # the operation to run
    params: msgspec.Raw = msgspec.Raw(b"{}")  # its parameters, as in a request of its own (JSON text: decoded once, by ops.run)
    touch: bool = True  # refresh the agent's last-seen first
    unread: bool = True  # count the agent's unread messages afterwards


class SessionCallResult(msgspec.Struct, kw_only=True):
    result: Any  # what the operation answers on its own
    unread: int | None = None  # the agent's unread messages after it (when asked)


@operation("session_call", SessionCallParams)
def session_call(store: Store, p: SessionCallParams) -> SessionCallResult:
    """Run one operation for an agent's session: refresh its last-seen, run it, count its unread (relay-mcp's tool calls)."""
    from . import ops

    op = ops.lookup(p.op)
    if op.name in TEAM_DECIDED or op.name == "session_call":
        raise UsageError(f"session_call cannot run {op.name}: send it as a request of its own", op=op.name)
    if p.touch:
        touch(store, TouchParams(agent=p.agent))
    result = msgspec.to_builtins(ops.run(store, op, p.params))
    count = unread(store, UnreadParams(agent=p.agent)).unread if p.unread else None
    return SessionCallResult(result=result, unread=count)
