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
    delivery: "DeliveryCounts | None" = None
    bridge: dict | None = None  # relayd --bridge: connection, backlog, agents of other hosts


class DeliveryCounts(msgspec.Struct, kw_only=True):
    """Messages sent with ack: still owed, and dead-lettered, in all and per recipient."""

    owed: int
    dead_letters: int
    owed_by_agent: dict[str, int]
    dead_letters_by_agent: dict[str, int]


def delivery_counts(store: Store) -> DeliveryCounts:
    from . import layout
    from .owed import count_by_agent

    owed = count_by_agent(store, layout.OWED)
    dead = count_by_agent(store, layout.DEAD_LETTER)
    return DeliveryCounts(owed=sum(owed.values()), dead_letters=sum(dead.values()), owed_by_agent=owed, dead_letters_by_agent=dead)


@operation("status", StatusParams, mutates=False)
def status(store: Store, p: StatusParams) -> StatusResult:
    """Everything `relayctl status` shows: agents alive/stale, reservations, pending commands, owed and dead-lettered messages."""
    from .commands import commands, CommandsParams
    from .reservations import listing

    from .remote import bridge_status
    from .timefmt import parse_duration

    return StatusResult(
        agents=agent_states(store, None, p.stale),
        reservations=[msgspec.to_builtins(r) for r in listing(store, expired=True)],
        commands=[msgspec.to_builtins(c) for c in commands(store, CommandsParams(status="pending"))],
        delivery=delivery_counts(store),
        bridge=bridge_status(store, parse_duration(p.stale).total_seconds()),
    )
