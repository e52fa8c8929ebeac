"""The Claude Code inbox as a way mail reaches an agent: learning a session's socket, and writing to it.

A door before keystrokes (DESIGN §4): where the agent's Claude Code session has its
cross-session inbox (relayd.arrival.claude_inbox_format says what it is), relay writes
each new message there as a peer message instead of typing a trigger into the pane.

How relay learns the door: relay's hooks run as the session's children and see
`CLAUDE_CODE_MESSAGING_SOCKET`; at the session's start and at each prompt `relayctl hook
claude` reports it (the `claude_inbox` operation below). The operation checks it the way
Claude Code checks its own (`inspect`): the socket's directory and file owned by this user,
0700 and 0600, the session record `<pid>.json` beside the key file naming that socket, the
pid's start time in /proc equal to the record's, a peer protocol relay speaks, and the
session's `crossSessionInbound` setting not `refuse` (`hold` parks each message for the
person's approval: Claude Code's receipts say so, relayd.arrival.claude_peer). What it found is kept in
`agents/<name>/claude-inbox` with the process it belongs to (pid and start time), so a
later session in the same pane never gets an earlier one's socket: the door is checked
again before every use, and a process that is gone (or a pid used again) voids it.

How mail goes through it (`announce`, called by relayd.arrival.notify for an agent with a
door): every unread message not yet written to this session (the ids written are kept in
`agents/<name>/claude-inbox-sent`, with the session's start time) goes in one peer
message over one connection. Claude Code admits a sender's peer messages by a token bucket
(claude_inbox_format.BUCKET_CAPACITY at once, then REFILL_PER_SECOND) and drops the rest:
relay keeps the same bucket for each session (`agents/<name>/claude-inbox-bucket`), and
with none left the mail waits for the next round (held, `track` says why); mail Claude
Code still drops for want of room is written again. A door that cannot be used leaves the agent's own mechanism
(pane trigger, channel, hooks) to do the work, and `status` says why (`why_not`).

A message written there is "announced" (seen to land in the session's queue); what Claude
Code does with it then (held, delivered, denied, ...) comes back as its own receipts on
relayd's socket (relayd.arrival.claude_peer, `receipt_came`); "read" is still recorded
when relay's hooks or tools put the full mail in front of the model.
"""

from __future__ import annotations

import json
from contextlib import closing
import os
import stat
import sys

import msgspec

from .. import layout
from ..fsio import Dir
from ..records import check_agent_name
from ..registry import operation
from ..store import Store
from ..timefmt import now_iso
from . import claude_inbox_format as fmt
from . import door_record
from .program_process import started
from ..wire import peer

DOOR = "claude-inbox"  # agents/<name>/claude-inbox: the session's inbox, as relay found it
SENT = "claude-inbox-sent"  # agents/<name>/claude-inbox-sent: the session's start time, then the ids written to it
BUCKET = "claude-inbox-bucket"  # agents/<name>/claude-inbox-bucket: the session's start time, relay's tokens left, and when
LOCK = "claude-inbox.lock"  # held while the ids written (and the tokens) change: a round and a receipt
KEEP_SENT = 200  # ids remembered: more than the unread mail one round looks at
METHOD = "claude-inbox"  # the arrival mechanism's name in outcomes, receipts and status
TITLE = "Claude Code inbox"  # as status names it
REPORTED_AT_START = True  # its session's SessionStart hook reports it, before any prompt (relayd.arrival.notify DOOR_WAIT)
CONNECT_TIMEOUT = 2.0
BATCH = 20  # messages written in one round at most; the rest go in the next


class InboxDoor(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A Claude Code session's inbox, tied to the process it belongs to."""

    socket: str
    pid: int
    proc_start: str
    sessions_dir: str  # where its session record and key file are
    session_id: str | None = None
    version: str | None = None
    cwd: str | None = None
    at: str | None = None  # when relay last saw it
    unusable: str | None = None  # why relay cannot use it (then the agent's own mechanism works)


_door = msgspec.json.Decoder(InboxDoor)
_encode = msgspec.json.Encoder()


def _private(path: str, kind: int, mode: int) -> str | None:
    """Why `path` is not this user's own (`kind`, at most `mode`); None when it is."""
    try:
        found = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if stat.S_IFMT(found.st_mode) != kind:
        return f"{path} is not a {'socket' if kind == stat.S_IFSOCK else 'directory' if kind == stat.S_IFDIR else 'regular file'}"
    if found.st_uid != os.getuid():
        return f"{path} belongs to another user (uid {found.st_uid})"
    if stat.S_IMODE(found.st_mode) & ~mode:
        return f"{path} is open to others (mode {stat.S_IMODE(found.st_mode):o}; Claude Code makes it {mode:o})"
    return None


def _inbound_setting(cwd: str | None, config_dir: str) -> tuple[str, str] | None:
    """(value, file) of a `crossSessionInbound` that keeps relay's mail from the model
    (`refuse`), from the user's and the project's settings."""
    files = [os.path.join(config_dir, "settings.json")]
    if cwd:
        files += [os.path.join(cwd, ".claude", "settings.json"), os.path.join(cwd, ".claude", "settings.local.json")]
    for path in files:
        try:
            with open(path, "rb") as fh:
                value = json.load(fh).get("crossSessionInbound")
        except (OSError, ValueError, AttributeError):
            continue
        if value == "refuse":  # (`hold` lets it in once the person allows it: relay hears the receipts)
            return value, path
    return None


def inspect(socket_path: str, sessions_dir: str) -> InboxDoor:
    """The door at `socket_path`, checked as Claude Code checks its own; `unusable` says
    why relay may not use it."""
    socket_path = os.path.abspath(socket_path)
    pid = fmt.pid_of_socket(socket_path) or 0
    door = InboxDoor(socket=socket_path, pid=pid, proc_start="", sessions_dir=os.path.abspath(sessions_dir), at=now_iso())
    door.unusable = _check(door)
    return door


def _check(door: InboxDoor) -> str | None:
    if not door.pid:
        return f"{door.socket} is not named <pid>.sock, as Claude Code names its sockets"
    if os.environ.get(fmt.SWITCH_ENV) == "0":
        return f"{fmt.SWITCH_ENV}=0 turns Claude Code's inbox off here"
    why = _private(os.path.dirname(door.socket), stat.S_IFDIR, 0o700) or _private(door.socket, stat.S_IFSOCK, 0o600)
    if why:
        return why
    record_path = os.path.join(door.sessions_dir, fmt.record_name(door.pid))
    try:
        with open(record_path, "rb") as fh:
            raw, owner = fh.read(), os.fstat(fh.fileno()).st_uid
    except OSError:
        return f"Claude Code has no session record {record_path} (a version without the inbox?)"
    if owner != os.getuid():
        return f"{record_path} belongs to another user"
    record = fmt.decode_record(raw)
    if record is None or record.pid != door.pid:
        return f"{record_path} is not a session record relay can read"
    why = fmt.unusable(record, door.socket)
    if why:
        return why
    running = started(door.pid)
    if running is None or running != record.procStart:
        return f"the session of {record_path} is no longer running"
    door.proc_start, door.session_id, door.version, door.cwd = running, record.sessionId, record.version, record.cwd
    if door.proc_start and _token(door) is None:
        return f"no key file of this user's for {door.socket} in {door.sessions_dir}"
    setting = _inbound_setting(record.cwd, os.path.dirname(door.sessions_dir))
    if setting:
        return f"crossSessionInbound is {setting[0]} ({setting[1]}): Claude Code would not put relay's mail in front of the model"
    return None


def _token(door: InboxDoor) -> str | None:
    path = os.path.join(door.sessions_dir, fmt.key_name(door.pid, door.socket))
    if _private(path, stat.S_IFREG, 0o600):
        return None
    try:
        with open(path, "rb") as fh:
            return fmt.decode_key(fh.read())
    except OSError:
        return None


def read_door(agent: Dir) -> InboxDoor | None:
    return door_record.read(agent, DOOR, _door)


def current(agent: Dir) -> InboxDoor | None:
    """The agent's door checked now: None when it has none; `unusable` set when its
    process is gone or it cannot be used any more."""
    door = read_door(agent)
    if door is None or not door.socket:
        return door
    if door.proc_start and started(door.pid) != door.proc_start:
        door.unusable = "the Claude Code session that had it has ended"
        return door
    door.unusable = _check(door)
    return door


def why_not(agent: Dir) -> str | None:
    """For status: why an agent whose session reported an inbox is not reached through it."""
    door = current(agent)
    return door.unusable if door is not None else None


class ClaudeInboxParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str
    socket: str  # "": the session named no inbox to its children (`missing` says why)
    sessions_dir: str
    missing: str | None = None


@operation("claude_inbox", ClaudeInboxParams)
def learn(store: Store, p: ClaudeInboxParams) -> InboxDoor:
    """Record the Claude Code inbox an agent's session reported (relay's hooks call it)."""
    check_agent_name(p.agent)
    if not store.is_agent(p.agent):
        raise store.unknown_agent(p.agent)
    if p.socket:
        door = inspect(p.socket, p.sessions_dir)
    else:
        door = InboxDoor(socket="", pid=0, proc_start="", sessions_dir=p.sessions_dir, at=now_iso(),
                    unusable=p.missing or f"its session names no inbox ({fmt.SOCKET_ENV} unset)")
    with store.agent_dir(p.agent) as agent:
        before = read_door(agent)
        agent.replace(DOOR, _encode.encode(door) + b"\n", None)
    if door.unusable is None and (before is None or (before.pid, before.proc_start) != (door.pid, door.proc_start) or before.unusable):
        # a new door: mail that waited for the session goes now (relayd.daemon.notifications)
        store.emit(store.event("agent", action="idle", agent=p.agent), durable=False)
    return door


def waiting(store: Store, name: str, agent: Dir) -> bool:
    """Unread mail not yet written to the agent's usable door."""
    door = current(agent)
    return door is not None and not door.unusable and bool(_unsent(store, name, agent, door))


def _unsent(store: Store, name: str, agent: Dir, door: InboxDoor) -> list[dict]:
    # deferred import: the inbox's read path is loaded only for an agent with a door
    from ..inbox.read import ReadParams, read

    sent = _sent(agent, door)
    unread = read(store, ReadParams(agent=name, unread=True, last=BATCH * 5)).messages
    # Mail a Claude Code model sent never goes back into a Claude Code inbox: no loop (the
    # agent's own mechanism, its hooks or pane, tells it instead).
    return [msgspec.to_builtins(m) for m in unread if m.id not in sent and fmt.VIA_CLAUDE_CODE not in m.tags][:BATCH]


def _sent_lines(agent: Dir, door: InboxDoor) -> list[list[str]]:
    """What was written to this session (none for another process): per message its relay
    id, then the peer message's id and the mail's sender (for Claude Code's receipts)."""
    lines = (agent.read_bytes(SENT) or b"").decode(errors="replace").splitlines()
    if not lines or lines[0].strip() != door.proc_start:
        return []
    return [line.split() for line in lines[1:] if line.strip()]


def _sent(agent: Dir, door: InboxDoor) -> list[str]:
    """The ids already written to this session (none for another process)."""
    return [fields[0] for fields in _sent_lines(agent, door)]


def written(agent: Dir, door: InboxDoor, msg_id: str) -> list[tuple[str, str | None]]:
    """(relay id, sender) of each mail written to this session in peer message `msg_id`."""
    return [(fields[0], fields[2] if len(fields) > 2 else None) for fields in _sent_lines(agent, door)
            if len(fields) >= 2 and fields[1] == msg_id]


def _keep_sent(agent: Dir, door: InboxDoor, lines: list[str]) -> None:
    agent.replace(SENT, "\n".join([door.proc_start, *lines[-KEEP_SENT:], ""]).encode(), None)


def _tokens(agent: Dir, door: InboxDoor, now: float) -> float:
    """The peer messages Claude Code would admit from relay now (its bucket, as relay keeps it)."""
    fields = (agent.read_bytes(BUCKET) or b"").decode(errors="replace").split()
    if len(fields) != 3 or fields[0] != door.proc_start:
        return float(fmt.BUCKET_CAPACITY)  # a new session: a full bucket
    try:
        tokens, at = float(fields[1]), float(fields[2])
    except ValueError:
        return float(fmt.BUCKET_CAPACITY)
    return min(float(fmt.BUCKET_CAPACITY), tokens + max(0.0, now - at) * fmt.REFILL_PER_SECOND)


def _keep_tokens(agent: Dir, door: InboxDoor, tokens: float, now: float) -> None:
    agent.replace(BUCKET, f"{door.proc_start} {tokens:.3f} {now:.3f}\n".encode(), None)


def announce(store: Store, name: str, agent: Dir, door: InboxDoor) -> dict:
    """Write the agent's new mail into its session's inbox: the outcome for the notifier
    (`{"agent", "method", "ok", "skipped"?, "error"?}`)."""
    outcome: dict = {"agent": name, "method": METHOD}
    with agent.locked(LOCK):
        return _announce(store, name, agent, door, outcome)


def _announce(store: Store, name: str, agent: Dir, door: InboxDoor, outcome: dict) -> dict:
    messages = _unsent(store, name, agent, door)
    if not messages:
        outcome.update(ok=True, skipped="claude-inbox: nothing new since the last write")
        return outcome
    now = store.clock()
    tokens = _tokens(agent, door, now)
    if tokens < 1:
        wait = (1 - tokens) / fmt.REFILL_PER_SECOND
        outcome.update(ok=True, retry=True, retry_in=round(wait, 3), skipped=f"claude-inbox: Claude Code takes {fmt.BUCKET_CAPACITY} messages at once from relay, "
                       f"then one every {1 / fmt.REFILL_PER_SECOND:.0f} s: the next can go in {wait:.1f} s")
        return outcome
    token = _token(door)
    # Where Claude Code's receipts come back to: relayd's own socket beside the session's
    # (relayd.arrival.claude_peer); none in a process that does not listen (direct mode).
    # (The module is loaded only where relayd listens: a direct-mode client never imports it.)
    listener = sys.modules.get("relayd.arrival.claude_peer")
    reply = listener.reply_address(os.path.dirname(door.socket)) if listener is not None else None
    # All of a round's mail in one peer message: one of the bucket's tokens, and one turn.
    texts = [fmt.mail_text(name, m) for m in messages]
    earlier: list[str] | None = None
    try:
        msg_id, line = fmt.message_line("\n\n".join(texts), reply)  # (a line too long for Claude Code: ValueError)
        # What is written is kept before it is written: Claude Code's receipt can come back
        # within milliseconds, and one for a message relay has not noted yet would be dropped.
        earlier = [" ".join(fields) for fields in _sent_lines(agent, door)]
        _keep_sent(agent, door, earlier + [f"{m['id']} {msg_id} {m['from']}" for m in messages])
        with closing(peer.connect(door.socket, CONNECT_TIMEOUT)) as sock:  # this user's socket and process, or nothing is sent
            sock.sendall(b"".join([*([fmt.auth_line(token)] if token else []), line]))
        _keep_tokens(agent, door, tokens - 1, now)
    except (peer.ForeignSocket, OSError, ValueError) as exc:
        if earlier is not None:  # not written after all: the next round writes them again
            _keep_sent(agent, door, earlier)
        where = "" if isinstance(exc, peer.ForeignSocket) else f" {door.socket}"
        outcome.update(ok=False, error=f"Claude Code inbox{where}: {getattr(exc, 'strerror', None) or exc}")
        return outcome
    agent.unlink(layout.PENDING, missing_ok=True)
    outcome.update(ok=True, chars=sum(map(len, texts)))  # what the model is handed (relayd.delivery.spend)
    return outcome


def receipt_came(store: Store, pid: int, receipt: fmt.Receipt) -> None:
    """Claude Code's receipt for a peer message, from the session of `pid`: recorded for the
    message relay wrote to that session as `receipt.msg_id` (relayd.delivery.receipts); a
    receipt no door of that process explains is dropped."""
    # deferred import: the delivery wing's ledger only in relayd, when a receipt comes
    from ..delivery.receipts import door_receipt

    running = started(pid)
    for name in store.known_agents():
        with store.agent_dir(name) as agent:
            door = read_door(agent)
            if door is None or door.pid != pid or not door.proc_start or door.proc_start != running:
                continue
            found = written(agent, door, receipt.msg_id)
            again = bool(found) and receipt.status == "dropped" and receipt.detail in fmt.RETRIED_DROPS
            if again:
                _written_again(store, agent, door, receipt.msg_id)
        if found:
            for message_id, sender in found:
                # (mail relay writes again is not the sender's worry: `track` shows the drop)
                door_receipt(store, name, message_id, None if again else sender, METHOD, receipt.status, receipt.detail)
            if again:  # the notifier's next round finds it unwritten, and says when it can go
                store.emit(store.event("agent", action="idle", agent=name), durable=False)
            return


def _written_again(store: Store, agent: Dir, door: InboxDoor, msg_id: str) -> None:
    """Claude Code dropped peer message `msg_id` for want of room (rate-limited, its queue
    full): its mail counts as not written, so a later round writes it again, and relay's
    bucket is taken as empty."""
    with agent.locked(LOCK):
        _keep_sent(agent, door, [" ".join(fields) for fields in _sent_lines(agent, door) if len(fields) < 2 or fields[1] != msg_id])
        _keep_tokens(agent, door, 0.0, store.clock())


def listen(store_root: str) -> None:
    """relayd's socket for Claude Code's receipts (relayd.arrival.claude_peer), from now until `claude_peer.stop`."""
    # deferred import: only relayd listens (and a client's start-up stays without sockets and threads)
    from . import claude_peer

    claude_peer.start(store_root, receipt_came)
