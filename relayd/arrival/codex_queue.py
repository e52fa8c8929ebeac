"""Codex's own queue as a way mail reaches an agent: learning a session's thread, and queueing into it.

A door before keystrokes (DESIGN §4): where the agent's Codex session runs a Codex with
`codex queue` (relayd.arrival.codex_queue_format says what it is and how Codex takes it),
relay queues a short notice of new mail into the session's thread instead of typing a
trigger into the pane. Codex submits it as the thread's next turn: at once when idle,
after the running tool otherwise; a permission question on screen is left alone.

How relay learns the door: relay's hooks run as Codex's children; at the session's start
and at each prompt `relayctl hook codex` reports the event's `session_id` (the thread),
the Codex process above it and the session's CODEX_HOME (the `codex_queue` operation
below). The operation ties the door to that process (pid and start time from /proc) and
the binary it runs, and asks that binary whether it has `codex queue`. What it found is
kept in `agents/<name>/codex-queue`; a process that is gone (or a pid used again) voids it.

How mail goes through it (`announce`, called by relayd.arrival.notify): the unread mail
not yet queued for this session (the ids are kept in `agents/<name>/codex-queue-sent`,
after the session's pid, start time and thread) is named in one notice, queued with
`codex queue`. Codex gives no receipt: "announced" is the command's success; "read" is
still recorded when relay's hooks or tools put the mail in front of the model (the notice
turn's own prompt hook hands it over). After the person declined a question, Codex keeps
the notice until their next prompt: the announcement's note says so (`track` shows it).
A door that cannot be used leaves the agent's own mechanism (pane trigger, hooks) to do
the work, and `status` says why (`why_not`).
"""

from __future__ import annotations

import os

import msgspec

from .. import layout
from ..fsio import Dir
from ..records import check_agent_name
from ..registry import operation
from ..store import Store
from ..timefmt import now_iso
from ..programs.codex import is_codex_exe
from . import codex_queue_format as fmt
from . import door_record
from .program_process import started
from .program_state import read as read_program_state

DOOR = "codex-queue"  # agents/<name>/codex-queue: the session's thread, as relay found it
SENT = "codex-queue-sent"  # agents/<name>/codex-queue-sent: the session's key line, then the ids queued for it
KEEP_SENT = 200
METHOD = "codex-queue"  # the arrival mechanism's name in outcomes, receipts and status
TITLE = "Codex queue"  # as status names it
REPORTED_AT_START = False  # Codex makes its thread, and runs its first hook, with the session's first prompt
QUEUE_TIMEOUT = 15.0  # seconds for `codex queue` (it starts Codex's config and databases: ~0.5-1.2 s)
BATCH = 20


class QueueDoor(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A Codex session's thread, tied to the process it belongs to."""

    thread: str
    pid: int
    proc_start: str
    codex: str  # the binary that process runs: it queues with the same version
    codex_home: str
    at: str | None = None
    unusable: str | None = None  # why relay cannot use it (then the agent's own mechanism works)


_door = msgspec.json.Decoder(QueueDoor)
_encode = msgspec.json.Encoder()
_has_queue: dict[tuple[str, int, float], bool] = {}  # (binary, size, mtime) -> whether it has `codex queue`


def _queue_command(codex: str) -> str | None:
    """Why `codex` cannot queue (None: it has `codex queue`); asked once per binary."""
    try:
        found = os.stat(codex)
    except OSError as exc:
        return f"{codex}: {exc.strerror}"
    key = (codex, found.st_size, found.st_mtime)
    if key not in _has_queue:
        import subprocess  # deferred import: a send or status that queues nothing never needs it (~3 ms)

        try:
            done = subprocess.run([codex, "queue", "--help"], stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
            _has_queue[key] = fmt.has_queue(done.stdout.decode(errors="replace"))
        except (OSError, subprocess.TimeoutExpired):
            _has_queue[key] = False
    return None if _has_queue[key] else f"{codex} has no `codex queue` (a Codex before it)"


def inspect(thread: str, pid: int, codex_home: str) -> QueueDoor:
    """The door of the Codex process `pid` for `thread`; `unusable` says why relay may not use it."""
    door = QueueDoor(thread=thread, pid=pid, proc_start=started(pid) or "", codex="", codex_home=codex_home, at=now_iso())
    try:
        door.codex = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        door.unusable = f"no Codex process {pid}"
        return door
    if not door.proc_start or not is_codex_exe(door.codex):
        door.unusable = f"process {pid} runs {door.codex}, not Codex"
        return door
    door.unusable = _queue_command(door.codex)
    return door


def read_door(agent: Dir) -> QueueDoor | None:
    return door_record.read(agent, DOOR, _door)


def current(agent: Dir) -> QueueDoor | None:
    """The agent's door checked now: None when it has none; `unusable` set when its
    process is gone."""
    door = read_door(agent)
    if door is None or door.unusable:
        return door
    if started(door.pid) != door.proc_start:
        door.unusable = "the Codex session that had it has ended"
    return door


def usable(agent: Dir) -> bool:
    door = current(agent)
    return door is not None and not door.unusable


def why_not(agent: Dir) -> str | None:
    """For status: why an agent whose session reported a Codex thread is not reached through it."""
    door = current(agent)
    return door.unusable if door is not None else None


class CodexQueueParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str
    thread: str  # "": the session gave its hooks no thread (`missing` says why)
    pid: int
    codex_home: str
    missing: str | None = None


@operation("codex_queue", CodexQueueParams)
def learn(store: Store, p: CodexQueueParams) -> QueueDoor:
    """Record the Codex thread an agent's session reported (relay's hooks call it)."""
    check_agent_name(p.agent)
    if not store.is_agent(p.agent):
        raise store.unknown_agent(p.agent)
    with store.agent_dir(p.agent) as agent:
        before = read_door(agent)
    if before is not None and not before.unusable and (before.thread, before.pid, before.codex_home) == (p.thread, p.pid, p.codex_home) \
            and started(p.pid) == before.proc_start:
        return before  # the same session's next prompt: nothing new to check
    if p.thread and p.pid:
        door = inspect(p.thread, p.pid, p.codex_home)
    else:
        door = QueueDoor(thread=p.thread, pid=p.pid, proc_start="", codex="", codex_home=p.codex_home, at=now_iso(),
                    unusable=p.missing or "its session gave relay's hooks no thread id")
    with store.agent_dir(p.agent) as agent:
        agent.replace(DOOR, _encode.encode(door) + b"\n", None)
    if door.unusable is None:
        # a new door: mail that waited for the session goes now (relayd.daemon.notifications)
        store.emit(store.event("agent", action="idle", agent=p.agent), durable=False)
    return door


def waiting(store: Store, name: str, agent: Dir) -> bool:
    """Unread mail not yet queued for the agent's usable door."""
    door = current(agent)
    return door is not None and not door.unusable and bool(_unsent(store, name, agent, door))  # (checked twice: cheap, /proc)


def _key(door: QueueDoor) -> str:
    return f"{door.pid}:{door.proc_start}:{door.thread}"


def _sent(agent: Dir, door: QueueDoor) -> list[str]:
    """The ids already queued for this session (none for another process or thread)."""
    lines = (agent.read_bytes(SENT) or b"").decode(errors="replace").split()
    return lines[1:] if lines and lines[0] == _key(door) else []


def _unsent(store: Store, name: str, agent: Dir, door: QueueDoor) -> list[dict]:
    # deferred import: the inbox's read path is loaded only for an agent with a door
    from ..inbox.read import ReadParams, read

    sent = set(_sent(agent, door))
    unread = read(store, ReadParams(agent=name, unread=True, last=BATCH * 5)).messages
    return [msgspec.to_builtins(m) for m in unread if m.id not in sent][:BATCH]


def announce(store: Store, name: str, agent: Dir, door: QueueDoor) -> dict:
    """Queue a notice of the agent's new mail into its session's thread: the outcome for
    the notifier (`{"agent", "method", "ok", "skipped"?, "error"?}`)."""
    outcome: dict = {"agent": name, "method": METHOD}
    messages = _unsent(store, name, agent, door)
    if not messages:
        outcome.update(ok=True, skipped="codex-queue: nothing new since the last notice")
        return outcome
    notice = fmt.notice(name, messages)
    argv = fmt.queue_argv(door.codex, door.thread, notice)
    env = {**os.environ, "CODEX_HOME": door.codex_home}
    import subprocess  # deferred import: only a session with a door runs `codex queue`

    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=QUEUE_TIMEOUT, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        outcome.update(ok=False, error=f"codex queue: {getattr(exc, 'strerror', None) or exc}")
        return outcome
    stdout = done.stdout.decode(errors="replace")
    if done.returncode != 0 or not fmt.queued(stdout, door.thread):
        said = " ".join(done.stderr.decode(errors="replace").split())[-200:]
        outcome.update(ok=False, error=f"codex queue exited {done.returncode}" + (f": {said}" if said else ""))
        return outcome
    kept = (_sent(agent, door) + [m["id"] for m in messages])[-KEEP_SENT:]
    agent.replace(SENT, "\n".join([_key(door), *kept, ""]).encode(), None)
    agent.unlink(layout.PENDING, missing_ok=True)
    state = read_program_state(agent)
    outcome.update(ok=True, chars=len(notice))  # what the model is handed (relayd.delivery.spend)
    if state is not None and fmt.held_for_person(state.state, state.event):
        outcome["note"] = fmt.HELD_NOTE
    return outcome
