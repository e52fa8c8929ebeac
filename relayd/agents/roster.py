"""Agent identity and presence: register, heartbeat, status updates, and who is alive."""

from __future__ import annotations

import os

import msgspec

from .. import layout
from ..errors import StoreError, UnknownAgent, UsageError
from ..fsio import Dir
from ..records import AgentMeta, check_agent_name, json_encoder, meta_decoder
from ..registry import operation
from ..store import Store
from ..timefmt import now, now_iso, parse_duration, parse_iso
from ..programs.registry import takes_channel
from .presence import archived, last_heartbeat, touch_heartbeat

NOTIFY_KINDS = ("tmux", "zellij", "cmd", "channel", "hook", "none")


def arrival_mechanism(notify: str | None, program: str | None) -> str:
    """How an agent's mail reaches it: its `register --notify`; when unset, relay-mcp's
    channel push for a Claude Code agent (or one of no named program, as relay-mcp
    registers them), and none for any other program: Codex and Gemini CLI have no
    channel, so they see mail only when they look (or through hooks, --notify hook)."""
    if notify:
        return notify
    return "channel" if not program or takes_channel(program) else "none"
MAX_FIELD = 4096


def _check_notify(value: str | None) -> str | None:
    if value is None:
        return None
    kind, _, target = value.partition(":")
    if kind not in NOTIFY_KINDS:
        raise UsageError(f"invalid --notify {value!r}: use tmux:TARGET, zellij:PANE_ID, cmd:ARGV..., channel, hook or none")
    if kind in ("tmux", "zellij", "cmd") and not target.strip():
        raise UsageError(f"--notify {kind}: needs a target, e.g. {kind}:{'%1' if kind == 'tmux' else '2' if kind == 'zellij' else 'notify-send'}")
    return value


def _check_text(field: str, value: str | None) -> str | None:
    if value is not None and len(value) > MAX_FIELD:
        raise UsageError(f"{field} is too long ({len(value)} characters, at most {MAX_FIELD})")
    return value


def read_meta(agent: Dir) -> AgentMeta | None:
    raw = agent.read_bytes(layout.META)
    if raw is None:
        return None
    try:
        return meta_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise StoreError(f"{agent.path}/{layout.META} is corrupt: {exc}") from None


def write_meta(store: Store, agent: Dir, meta: AgentMeta) -> None:
    agent.replace(layout.META, json_encoder.encode(meta) + b"\n", store.sync)


# -- register --------------------------------------------------------------------------


class RegisterParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    role: str | None = None
    program: str | None = None
    model: str | None = None
    task: str | None = None
    bead: str | None = None
    status: str | None = None
    notify: str | None = None
    session: str | None = None
    join: bool = False  # an agent program naming itself (relay-mcp's role): refused in a fixed team


@operation("register", RegisterParams)
def register(store: Store, p: RegisterParams) -> AgentMeta:
    """Create or update an agent: its directory, empty inbox, meta.json and heartbeat."""
    return create_agent(store, p, seen=True)


def create_agent(store: Store, p: RegisterParams, seen: bool) -> AgentMeta:
    """`register`'s work. Without `seen` (a preset's team, created by `init` before any of
    them runs) no heartbeat is written: status shows them as never seen, not alive."""
    check_agent_name(p.name)
    if not store.is_agent(p.name):
        if p.join:
            _refuse_outside_fixed_team(store, p.name)
        # deferred imports: the bridge (remote) and config.json only where they are used: heartbeat
        # and status with relayd down load this module
        from .. import remote

        remote.refuse_unbridged(store, f"registering the new name {p.name} (names are unique across the bridged team)")
    notify = _check_notify(p.notify)
    for field in ("role", "program", "model", "task", "bead", "status", "session"):
        _check_text(field, getattr(p, field))
    agents = store.top(layout.AGENTS)
    agents.subdir(p.name, create=True, sync=store.sync).close()
    with agents.subdir(p.name) as agent:
        old = read_meta(agent)
        stamp = now_iso()
        meta = AgentMeta(
            name=p.name,
            role=p.role if p.role is not None else old and old.role,
            program=p.program if p.program is not None else old and old.program,
            model=p.model if p.model is not None else old and old.model,
            task=p.task if p.task is not None else old and old.task,
            bead=p.bead if p.bead is not None else old and old.bead,
            status=p.status if p.status is not None else old and old.status,
            notify=notify if notify is not None else old and old.notify,
            session=p.session if p.session is not None else old and old.session,
            registered_at=old.registered_at if old else stamp,
            updated_at=stamp,
        )
        if not agent.exists(layout.INBOX):
            os.close(agent.open(layout.INBOX, os.O_WRONLY | os.O_CREAT))
            store.sync.dir(agent.fd)
        write_meta(store, agent, meta)
        if seen:
            touch_heartbeat(agent)
    store.emit(store.event("agent", action="updated" if old else "registered", agent=p.name))
    return meta


def _refuse_outside_fixed_team(store: Store, name: str) -> None:
    """In a store made with a preset, a name the team does not have is most likely a typo
    of one it does (seed 000: unknown roles are refused)."""
    from ..config import load_config

    team = load_config(store).team
    if team.allow_new:
        return
    known = store.known_agents()
    if not known:
        preset = f"relayctl init --preset {team.preset}" if team.preset else "relayctl init --preset NAME"
        raise UnknownAgent(
            f"unknown agent {name!r}: this store's team is fixed (preset {team.preset or 'none'}) and has no agents (was it reset?); "
            f"make the team again with '{preset}', or add this one with 'relayctl register {name}'",
            agent=name,
            known=known,
        )
    raise UnknownAgent(
        f"unknown agent {name!r}: this store's team is fixed (preset {team.preset or 'none'}); known agents: {', '.join(known)}. "
        f"Use one of those names, or add this one on purpose with 'relayctl register {name}'",
        agent=name,
        known=known,
    )


# -- heartbeat and status --------------------------------------------------------------


class HeartbeatParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str
    task: str | None = None


class HeartbeatResult(msgspec.Struct, kw_only=True):
    agent: str
    heartbeat: str
    task: str | None = None


@operation("heartbeat", HeartbeatParams)
def heartbeat(store: Store, p: HeartbeatParams) -> HeartbeatResult:
    """Refresh the agent's heartbeat; `task` also updates meta.json."""
    _check_text("task", p.task)
    with store.agent_dir(p.agent) as agent:
        meta = read_meta(agent)
        if meta is None:
            raise store.unknown_agent(p.agent)
        if p.task is not None and p.task != meta.task:
            meta = msgspec.structs.replace(meta, task=p.task, updated_at=now_iso())
            write_meta(store, agent, meta)
        stamp = touch_heartbeat(agent)
    store.emit(store.event("presence", action="heartbeat", agent=p.agent), durable=False)
    return HeartbeatResult(agent=p.agent, heartbeat=stamp, task=meta.task)


class SetStatusParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str
    status: str
    task: str | None = None


@operation("set_status", SetStatusParams)
def set_status(store: Store, p: SetStatusParams) -> AgentMeta:
    """Set the agent's status (and task), as the MCP tool update_status does; refreshes presence."""
    _check_text("status", p.status)
    if not p.status.strip() or "\n" in p.status:
        raise UsageError("status must be one line of text, e.g. working, blocked, done")
    _check_text("task", p.task)
    with store.agent_dir(p.agent) as agent:
        meta = read_meta(agent)
        if meta is None:
            raise store.unknown_agent(p.agent)
        changes: dict[str, object] = {"status": p.status, "updated_at": now_iso()}
        if p.task is not None:
            changes["task"] = p.task
        meta = msgspec.structs.replace(meta, **changes)
        write_meta(store, agent, meta)
        touch_heartbeat(agent)
    store.emit(store.event("presence", action="status", agent=p.agent, status=p.status))
    return meta


# -- who is there ----------------------------------------------------------------------


class AgentState(msgspec.Struct, kw_only=True, omit_defaults=False):
    name: str
    alive: bool
    last_heartbeat: str | None
    age_seconds: float | None
    role: str | None = None
    status: str | None = None
    task: str | None = None
    program: str | None = None
    model: str | None = None
    bead: str | None = None
    notify: str | None = None
    archived: bool = False


class AgentsParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str | None = None  # one agent, or all when None
    stale: str = "5m"


def agent_states(store: Store, only: str | None = None, stale: str = "5m") -> list[AgentState]:
    threshold = parse_duration(stale).total_seconds()
    names = [check_agent_name(only)] if only else store.known_agents()
    reference = now()
    states = []
    for name in names:
        with store.agent_dir(name) as agent:
            meta = read_meta(agent)
            if meta is None:
                raise store.unknown_agent(name)
            beat = last_heartbeat(agent)
            away = archived(agent)
        age = None
        if beat:
            try:
                age = max(0.0, (reference - parse_iso(beat)).total_seconds())
            except UsageError:
                age = None
        states.append(
            AgentState(
                name=name,
                alive=age is not None and age <= threshold and not away,
                last_heartbeat=beat,
                age_seconds=round(age, 3) if age is not None else None,
                role=meta.role,
                status=meta.status,
                task=meta.task,
                program=meta.program,
                model=meta.model,
                bead=meta.bead,
                notify=meta.notify,
                archived=away,
            )
        )
    return states


@operation("agents", AgentsParams, mutates=False)
def agents(store: Store, p: AgentsParams) -> list[AgentState]:
    """List agents (or one) with presence: alive/stale by heartbeat age, status and task."""
    return agent_states(store, p.name, p.stale)


class TouchParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str


@operation("touch", TouchParams)
def touch(store: Store, p: TouchParams) -> HeartbeatResult:
    """Refresh last-seen without an event (every MCP tool call does this)."""
    if not os.path.isdir(store.root):
        # No store yet, so no such agent: relay-mcp then registers its role, which creates
        # the store as `relayctl init` would (a fresh machine needs no set-up step).
        raise UnknownAgent(f"unknown agent {p.agent!r}: there is no relay store at {store.root} yet", agent=p.agent, known=[])
    with store.agent_dir(p.agent) as agent:
        if not agent.exists(layout.META):
            raise store.unknown_agent(p.agent)
        stamp = touch_heartbeat(agent)
    return HeartbeatResult(agent=p.agent, heartbeat=stamp)
