"""`status`: agents with presence and how their mail reaches them, reservations and pending commands in one answer."""

from __future__ import annotations

import msgspec

from .agents.roster import AgentState, agent_states, arrival_mechanism, read_meta
from .delivery.receipts import ANNOUNCED_WINDOW_MS, LastAnnouncement, LastDoorStatus, last_announcements, last_door_statuses
from .delivery.held import Held, agent_held, thresholds
from .inbox.read import has_unread
from .registry import operation
from .store import Store
from . import layout
from .delivery.owed import count_by_agent
from .arrival.program_state import read
from .arrival import claude_inbox, codex_queue, copilot_extension
from .arrival.budget import Loop, loops
from .delivery.spend import Spent, last_hour
from .timefmt import now, parse_duration, parse_iso
from .team.commands import CommandsParams, commands
from .reservations.reserve import listing
from .remote import bridge_status


class StatusParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    stale: str = "5m"


class AgentOverview(AgentState, kw_only=True):
    """An agent as `status` shows it: presence, and how its mail reaches it."""

    arrives_by: str = "channel"  # its arrival mechanism (relayd.agents.roster.arrival_mechanism)
    announced: LastAnnouncement | None = None  # how it was last told of mail (the last day); failures in a row
    never_told: bool = False  # not told of mail since it was registered (that was within the last day read)
    session: str | None = None  # what its program is doing, from its hooks (relayd.arrival.program_state): idle, working, asking, ...
    door_unusable: str | None = None  # why its session's own door (its Claude Code inbox, its Codex queue) is not used
    held: Held | None = None  # its mail waits (not read nor told for delivery.held_after): why, since when (relayd.delivery.held)
    context: Spent | None = None  # what relay put into its model's context in the last hour, in tokens (relayd.delivery.spend)
    door_said: LastDoorStatus | None = None  # its program's newest receipt for mail relay wrote into it (Claude Code: held, delivered, ...)


class StatusResult(msgspec.Struct, kw_only=True):
    agents: list[AgentOverview]
    reservations: list[dict] = msgspec.field(default_factory=list)
    commands: list[dict] = msgspec.field(default_factory=list)
    delivery: "DeliveryCounts | None" = None
    bridge: dict | None = None  # relayd --bridge: connection, backlog, agents of other hosts
    paused: list[Loop] = msgspec.field(default_factory=list)  # exchanges the loop breaker holds (relayd.arrival.budget)


class DeliveryCounts(msgspec.Struct, kw_only=True):
    """Messages sent with ack: still owed, and dead-lettered, in all and per recipient."""

    owed: int
    dead_letters: int
    owed_by_agent: dict[str, int]
    dead_letters_by_agent: dict[str, int]


def delivery_counts(store: Store) -> DeliveryCounts:
    owed = count_by_agent(store, layout.OWED)
    dead = count_by_agent(store, layout.DEAD_LETTER)
    return DeliveryCounts(owed=sum(owed.values()), dead_letters=sum(dead.values()), owed_by_agent=owed, dead_letters_by_agent=dead)


def overviews(store: Store, states: list[AgentState]) -> list[AgentOverview]:
    told = last_announcements(store, [a.name for a in states])
    said = last_door_statuses(store, [a.name for a in states])
    doors = {a.name: _door(store, a.name) for a in states}
    held_after, _ = thresholds(store)
    return [
        AgentOverview(
            **msgspec.structs.asdict(a),
            arrives_by=doors[a.name][0] if doors[a.name][1] == "" else arrival_mechanism(a.notify, a.program),
            door_unusable=doors[a.name][1] or None,
            announced=told.get(a.name),
            never_told=a.name not in told and _registered_within_window(store, a.name),
            session=_session(store, a.name),
            held=agent_held(store, a.name, held_after) if has_unread(store, a.name) else None,
            context=_context(store, a.name),
            door_said=said.get(a.name),
        )
        for a in states
    ]


def _door(store: Store, name: str) -> tuple[str | None, str | None]:
    """(the door's mechanism, "") when the agent's mail goes through its session's own door
    (its Claude Code inbox, its Codex queue); (its mechanism, "<door>: why not") when its
    session reported one relay cannot use; (None, None) when it reported none."""
    with store.agent_dir(name) as agent:
        for door in (claude_inbox, codex_queue, copilot_extension):
            if agent.exists(door.DOOR):
                why = door.why_not(agent)
                return door.METHOD, f"{door.TITLE}: {why}" if why else ""
    return None, None


def _context(store: Store, name: str) -> Spent | None:
    with store.agent_dir(name) as agent:
        return last_hour(store, agent)


def _session(store: Store, name: str) -> str | None:
    with store.agent_dir(name) as agent:
        found = read(agent)
    return found.state if found else None


def _registered_within_window(store: Store, name: str) -> bool:
    """The agent is younger than the delivery log's window status reads: no announcement
    there means none ever (older agents may have been told before it)."""
    with store.agent_dir(name) as agent:
        meta = read_meta(agent)
    return meta is not None and (now() - parse_iso(meta.registered_at)).total_seconds() * 1000 < ANNOUNCED_WINDOW_MS


@operation("status", StatusParams, mutates=False)
def status(store: Store, p: StatusParams) -> StatusResult:
    """Everything `relayctl status` shows: agents alive/stale and how their mail last reached them, reservations, pending commands, owed and dead-lettered messages."""
    return StatusResult(
        agents=overviews(store, agent_states(store, None, p.stale)),
        reservations=[msgspec.to_builtins(r) for r in listing(store, expired=True)],
        commands=[msgspec.to_builtins(c) for c in commands(store, CommandsParams(status="pending"))],
        delivery=delivery_counts(store),
        bridge=bridge_status(store, parse_duration(p.stale).total_seconds()),
        paused=loops(store),
    )
