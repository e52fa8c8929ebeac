"""Slash commands (seed 004 §3.4, US-019/020): `commands/<ulid>.json`, pending -> consumed -> done.

Posting creates the file atomically. A consumer claims a pending command by creating
`commands/<id>.claim` with O_EXCL: exactly one of several concurrent consumers succeeds,
and only that one rewrites the file (atomically) to `consumed`. The marker stays until gc
removes the command, so a consumer that read the file while it was still pending can
never claim it a second time. `done` is one more atomic rewrite by the consumer.
"""

from __future__ import annotations

import msgspec

from .. import layout
from ..errors import Conflict, NotFound, StoreError, UsageError
from ..records import Command, check_agent_name, command_decoder, json_encoder
from ..registry import operation
from ..store import Store
from ..timefmt import now_iso
from ..ulid import is_ulid, new_ulid

SUFFIX = ".json"
MAX_SESSION = 256
MAX_TEXT = 4096


def _file(command_id: str) -> str:
    if not is_ulid(command_id):
        raise UsageError(f"not a command id: {command_id!r} (ids are 26-character ULIDs, as cmd prints them)")
    return command_id.upper() + SUFFIX


def _claim(command_id: str) -> str:
    return command_id + layout.COMMAND_CLAIM_SUFFIX


def read_command(store: Store, command_id: str) -> Command | None:
    raw = store.top(layout.COMMANDS).read_bytes(_file(command_id))
    if raw is None:
        return None
    try:
        return command_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise StoreError(f"command file {command_id}{SUFFIX} is damaged") from None


def _write(store: Store, command: Command) -> None:
    store.top(layout.COMMANDS).replace(command.id + SUFFIX, json_encoder.encode(command) + b"\n", store.sync)


def all_commands(store: Store) -> list[Command]:
    """Every readable command, oldest first (ULIDs sort by time)."""
    return [command for _, command in store.records(layout.COMMANDS, command_decoder)]


def _check_session(session: str) -> str:
    if not session or not session.strip() or len(session) > MAX_SESSION or "\n" in session:
        raise UsageError(f"session must be 1-{MAX_SESSION} characters on one line, e.g. agent:main:main")
    return session


# -- post ---------------------------------------------------------------------------------


class CmdParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str  # who posts it ("from")
    session: str  # target_session
    command: str
    args: str = ""


@operation("cmd", CmdParams)
def cmd(store: Store, p: CmdParams) -> Command:
    """Post a slash command for a session; it waits as `pending` until a consumer claims it."""
    check_agent_name(p.agent, "sender")
    _check_session(p.session)
    if not p.command.strip() or len(p.command) > MAX_TEXT or len(p.args) > MAX_TEXT:
        raise UsageError(f"command must be non-empty; command and args at most {MAX_TEXT} characters each")
    command = Command(id=new_ulid(), ts=now_iso(), from_=p.agent, target_session=p.session, command=p.command.strip(), args=p.args.strip())
    folder = store.top(layout.COMMANDS)
    if not folder.create_exclusive(command.id + SUFFIX, json_encoder.encode(command) + b"\n", store.sync):
        raise StoreError(f"command id {command.id} already exists")  # a ULID collision: not expected
    store.emit(store.event("command", action="created", command_id=command.id, target_session=p.session, agent=p.agent, status="pending"))
    return command


# -- consume ------------------------------------------------------------------------------


class ConsumeParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    session: str
    agent: str | None = None  # the consumer, recorded as consumed_by
    limit: int | None = None


@operation("cmd_consume", ConsumeParams)
def cmd_consume(store: Store, p: ConsumeParams) -> list[Command]:
    """Claim the session's pending commands, oldest first; each is claimed by exactly one consumer."""
    _check_session(p.session)
    if p.agent is not None:
        check_agent_name(p.agent, "consumer")
    if p.limit is not None and p.limit < 1:
        raise UsageError("limit must be 1 or more")
    folder = store.top(layout.COMMANDS)
    names = set(folder.listdir())
    claimed: list[Command] = []
    for name in sorted(names):
        if p.limit is not None and len(claimed) >= p.limit:
            break
        if not name.endswith(SUFFIX) or name.startswith("."):
            continue
        command_id = name[: -len(SUFFIX)]
        if _claim(command_id) in names:
            continue  # already claimed when we listed
        raw = folder.read_bytes(name)
        if not raw:
            continue
        try:
            command = command_decoder.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if command.status != "pending" or command.target_session != p.session:
            continue
        stamp = now_iso()
        if not folder.create_exclusive(_claim(command_id), f"{p.agent or ''} {stamp}\n".encode(), store.sync):
            continue  # another consumer won it
        command = msgspec.structs.replace(command, status="consumed", consumed_by=p.agent, consumed_at=stamp)
        _write(store, command)
        claimed.append(command)
    if claimed:
        store.emit(
            *(
                store.event("command", action="consumed", command_id=c.id, target_session=c.target_session, agent=p.agent, status="consumed")
                for c in claimed
            )
        )
    return claimed


# -- done, get, list ----------------------------------------------------------------------


class CmdIdParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    agent: str | None = None


@operation("cmd_done", CmdIdParams)
def cmd_done(store: Store, p: CmdIdParams) -> Command:
    """Mark a consumed command done (idempotent); a still-pending one must be claimed first."""
    command = read_command(store, p.id)
    if command is None:
        raise NotFound(f"no command {p.id}")
    if command.status == "done":
        return command
    if command.status == "pending":
        raise Conflict(f"command {command.id} is still pending: claim it first (relayctl cmd consume --session {command.target_session})")
    command = msgspec.structs.replace(command, status="done", done_at=now_iso())
    _write(store, command)
    store.emit(store.event("command", action="done", command_id=command.id, target_session=command.target_session, agent=p.agent, status="done"))
    return command


@operation("cmd_get", CmdIdParams, mutates=False)
def cmd_get(store: Store, p: CmdIdParams) -> Command:
    """One command by id, with its current status."""
    command = read_command(store, p.id)
    if command is None:
        raise NotFound(f"no command {p.id}")
    return command


class CommandsParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    status: str | None = None
    session: str | None = None


@operation("commands", CommandsParams, mutates=False)
def commands(store: Store, p: CommandsParams) -> list[Command]:
    """List commands, oldest first, optionally by status (pending/consumed/done) and session."""
    if p.status is not None and p.status not in ("pending", "consumed", "done"):
        raise UsageError(f"status must be pending, consumed or done, not {p.status!r}")
    return [c for c in all_commands(store) if (p.status is None or c.status == p.status) and (p.session is None or c.target_session == p.session)]
