"""`status`: agents with presence, reservations and pending commands in one answer."""

from __future__ import annotations

import msgspec

from .agents import AgentState, agent_states
from .registry import operation
from .store import Store


class StatusParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    stale: str = "5m"


class StatusResult(msgspec.Struct, kw_only=True):
    agents: list[AgentState]
    reservations: list[dict] = msgspec.field(default_factory=list)
    commands: list[dict] = msgspec.field(default_factory=list)


@operation("status", StatusParams, mutates=False)
def status(store: Store, p: StatusParams) -> StatusResult:
    """Everything `relayctl status` shows: agents alive/stale, reservations, pending commands."""
    from .commands import commands, CommandsParams
    from .reservations import listing

    return StatusResult(
        agents=agent_states(store, None, p.stale),
        reservations=[msgspec.to_builtins(r) for r in listing(store, expired=True)],
        commands=[msgspec.to_builtins(c) for c in commands(store, CommandsParams(status="pending"))],
    )
