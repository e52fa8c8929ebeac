"""relay's GitHub Copilot CLI extension as a way mail reaches an agent: learning its socket, and enqueueing through it.

A door before keystrokes (DESIGN §4): where the agent's Copilot session runs relay's
extension (relayctl/copilot_extension.mjs; relayd.programs.copilot says how Copilot loads
it, and that it needs --experimental), relay hands the extension a short notice of new
mail, which it puts into the session with `session.send(..., mode "enqueue")`: the next
turn, at once when the session is idle, after the running turn otherwise. Nothing is typed
into the pane; a question on screen and the person's draft are left as they are.

How relay learns the door: the extension reports itself when it has joined the session and
listens (`relayctl hook copilot sessionStart`), and relay's hooks report it again at each
prompt; both give the socket (or, from the hooks, why there is none: relay's extension not
installed, a Copilot without --experimental). The `copilot_extension` operation connects
(the socket and the process answering must be this user's, relayd.wire.peer), asks the
extension who it is (`hello`: the agent it speaks for, its pid) and keeps what it found in
`agents/<name>/copilot-extension` with the extension's process (pid and start time): when
that process is gone (or its pid used again), the door is void.

How mail goes through it (`announce`, called by relayd.arrival.notify): the unread mail not
yet enqueued for this extension process (`agents/<name>/copilot-extension-sent`, after the
process's key) is named in one notice (relayd.arrival.for_models.mail_notice), sent over one
connection; the extension answers once Copilot took it, or says it holds the notice while a
permission question is open (Copilot drops what was enqueued when the person declines one;
the extension enqueues it once the session is idle again, and the announcement's note says
so: `track` shows it). "announced" is that answer; "read"
is still recorded when relay's hooks put the mail in front of the model (the notice turn's
own prompt hook hands it over). A door that cannot be used leaves the agent's own mechanism
(hooks and the pane trigger) to do the work, and `status` says why (`why_not`).
"""

from __future__ import annotations

import json
import os
from contextlib import closing

import msgspec

from .. import layout
from ..fsio import Dir
from ..records import check_agent_name
from ..registry import operation
from ..store import Store
from ..timefmt import now_iso
from ..wire import peer
from .for_models import mail_notice
from . import door_record, program_state
from .program_process import started

DOOR = "copilot-extension"  # agents/<name>/copilot-extension: the extension's socket, as relay found it
SENT = "copilot-extension-sent"  # agents/<name>/copilot-extension-sent: the extension's key line, then the ids enqueued
KEEP_SENT = 200
METHOD = "copilot-extension"  # the arrival mechanism's name in outcomes, receipts and status
TITLE = "Copilot extension"  # as status names it
REPORTED_AT_START = True  # the extension reports itself once Copilot has loaded it, before any prompt
TIMEOUT = 5.0  # seconds for one exchange: the extension answers once Copilot admitted the message (~10 ms)
BATCH = 20
NOTICE_MAX = 1200
ANSWER_MAX = 4096


class ExtensionDoor(msgspec.Struct, kw_only=True, omit_defaults=True):
    """relay's extension in one Copilot session, tied to the extension's process."""

    socket: str
    # The socket file as relay found it (inode and change time): a restarted session's
    # extension listens at the same path, in a file of its own, while the old extension's
    # process may still be on its way out.
    socket_file: str = ""
    pid: int = 0
    proc_start: str = ""
    at: str | None = None
    unusable: str | None = None  # why relay cannot use it (then hooks and the pane trigger work)


_door = msgspec.json.Decoder(ExtensionDoor)
_encode = msgspec.json.Encoder()


class _Refused(Exception):
    """The extension (or what answers on its socket) did not do what was asked: why."""


def _exchange(socket_path: str, request: dict) -> dict:
    """One request to the extension, its one-line answer."""
    try:
        with closing(peer.connect(socket_path, TIMEOUT)) as sock:  # this user's socket and process, or nothing is sent
            sock.sendall(json.dumps(request).encode() + b"\n")
            raw = b""
            while not raw.endswith(b"\n") and len(raw) < ANSWER_MAX:
                chunk = sock.recv(ANSWER_MAX)
                if not chunk:
                    break
                raw += chunk
    except peer.ForeignSocket as exc:
        raise _Refused(str(exc)) from None
    except OSError as exc:
        raise _Refused(f"{socket_path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        answer = json.loads(raw)
    except ValueError:
        raise _Refused(f"{socket_path} answered no relay extension's answer") from None
    if not isinstance(answer, dict):
        raise _Refused(f"{socket_path} answered no relay extension's answer")
    return answer


def inspect(socket_path: str, agent: str) -> ExtensionDoor:
    """The door at `socket_path`; `unusable` says why relay may not use it."""
    door = ExtensionDoor(socket=socket_path, socket_file=_file_of(socket_path), at=now_iso())
    try:
        hello = _exchange(socket_path, {"op": "hello"})
    except _Refused as why:
        door.unusable = str(why)
        return door
    pid = hello.get("pid")
    if hello.get("ok") is not True or not isinstance(pid, int) or isinstance(pid, bool):
        door.unusable = f"{socket_path} answered no relay extension's hello"
    elif hello.get("agent") != agent:
        door.unusable = f"the extension at {socket_path} speaks for {hello.get('agent')!r}, not {agent}"
    else:
        door.pid, door.proc_start = pid, started(pid) or ""
        if not door.proc_start:
            door.unusable = f"the extension's process {pid} is gone"
    return door


def _file_of(socket_path: str) -> str:
    """Which file is at `socket_path` now ("" when none): its inode and change time."""
    try:
        info = os.lstat(socket_path)
    except OSError:
        return ""
    return f"{info.st_ino}:{info.st_ctime_ns}"


def read_door(agent: Dir) -> ExtensionDoor | None:
    return door_record.read(agent, DOOR, _door)


def current(agent: Dir) -> ExtensionDoor | None:
    """The agent's door checked now: None when it has none; `unusable` set when the
    extension's process is gone."""
    door = read_door(agent)
    if door is None or door.unusable:
        return door
    if started(door.pid) != door.proc_start:
        door.unusable = "the Copilot session that had it has ended"
    return door


def usable(agent: Dir) -> bool:
    door = current(agent)
    return door is not None and not door.unusable


def why_not(agent: Dir) -> str | None:
    """For status: why an agent whose Copilot session reported on relay's extension is not reached through it."""
    door = current(agent)
    return door.unusable if door is not None else None


class CopilotExtensionParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str
    socket: str  # "": the session has no extension relay can reach (`missing` says why)
    missing: str | None = None


@operation("copilot_extension", CopilotExtensionParams)
def learn(store: Store, p: CopilotExtensionParams) -> ExtensionDoor:
    """Record relay's extension in an agent's Copilot session (it and relay's hooks call it)."""
    check_agent_name(p.agent)
    if not store.is_agent(p.agent):
        raise store.unknown_agent(p.agent)
    with store.agent_dir(p.agent) as agent:
        before = current(agent)
    if before is not None and not before.unusable and (not p.socket or (before.socket == p.socket and before.socket_file == _file_of(p.socket) != "")):
        return before  # the same extension (a hook of its session found it again, or cannot see it): nothing new
    if before is not None and not p.socket and before.unusable == p.missing:
        return before  # the same reason at the session's next prompt: nothing to write
    if p.socket:
        door = inspect(p.socket, p.agent)
    else:
        door = ExtensionDoor(socket="", at=now_iso(), unusable=p.missing or "its session reported no extension")
    with store.agent_dir(p.agent) as agent:
        agent.replace(DOOR, _encode.encode(door) + b"\n", None)
    if door.unusable is None:
        # a new door: mail that waited for the session goes now (relayd.daemon.notifications)
        store.emit(store.event("agent", action="idle", agent=p.agent), durable=False)
    return door


def waiting(store: Store, name: str, agent: Dir) -> bool:
    """Unread mail not yet enqueued through the agent's usable door."""
    door = current(agent)
    return door is not None and not door.unusable and bool(_unsent(store, name, agent, door))


def _key(door: ExtensionDoor) -> str:
    return f"{door.pid}:{door.proc_start}"


def _sent(agent: Dir, door: ExtensionDoor) -> list[str]:
    """The ids already enqueued through this extension process (none for another)."""
    lines = (agent.read_bytes(SENT) or b"").decode(errors="replace").split()
    return lines[1:] if lines and lines[0] == _key(door) else []


def _unsent(store: Store, name: str, agent: Dir, door: ExtensionDoor) -> list[dict]:
    # deferred import: the inbox's read path is loaded only for an agent with a door
    from ..inbox.read import ReadParams, read

    sent = set(_sent(agent, door))
    unread = read(store, ReadParams(agent=name, unread=True, last=BATCH * 5)).messages
    return [msgspec.to_builtins(m) for m in unread if m.id not in sent][:BATCH]


def announce(store: Store, name: str, agent: Dir, door: ExtensionDoor) -> dict:
    """Enqueue a notice of the agent's new mail into its Copilot session: the outcome for the
    notifier (`{"agent", "method", "ok", "skipped"?, "error"?}`)."""
    outcome: dict = {"agent": name, "method": METHOD}
    messages = _unsent(store, name, agent, door)
    if not messages:
        outcome.update(ok=True, skipped="copilot-extension: nothing new since the last notice")
        return outcome
    request = {"op": "enqueue", "prompt": mail_notice(name, messages, NOTICE_MAX)}
    state = program_state.read(agent)
    if state is not None and state.state == "asking":
        # relay's permissionRequest hook saw the question: the extension may not be told yet
        request["asking_since"] = state.at
    try:
        answer = _exchange(door.socket, request)
    except _Refused as why:
        outcome.update(ok=False, error=f"copilot extension: {why}")
        return outcome
    if answer.get("ok") is not True:
        outcome.update(ok=False, error=f"copilot extension: {str(answer.get('error') or 'refused')[:200]}")
        return outcome
    kept = (_sent(agent, door) + [m["id"] for m in messages])[-KEEP_SENT:]
    agent.replace(SENT, "\n".join([_key(door), *kept, ""]).encode(), None)
    agent.unlink(layout.PENDING, missing_ok=True)
    outcome.update(ok=True)
    if isinstance(answer.get("held"), str):
        outcome["note"] = f"held by relay's extension: {answer['held'][:200]}"
    return outcome
