"""Every relay agent as a peer in Claude Code's registry: listed by ListAgents, reached by SendMessage.

Claude Code lists the peers it may message from its session registry
(`~/.claude/sessions/<pid>.json`): one record a process, alive (the pid running, with the
record's start time) and with a socket that answers. So relayd gives each relay agent that
is not archived (Codex, Gemini, scripts, ...; not one that is itself a Claude Code session
with an inbox, which has a record of its own) a process of its own, a holder: relayd binds
the agent's socket, `<pid>-<8 hex>.sock` in the Claude Code sessions' socket directory, the
holder calls `listen` on it (so the kernel names the holder as the socket's process, as
Claude Code checks before it writes) and then only sleeps, dying with relayd
(PR_SET_PDEATHSIG); relayd itself accepts and reads. relayd writes the holder's record
(`SessionRecord`'s fields, the agent's name, its program and task, `peerProtocol` 1) and a
key file beside it (0600) whose token every writer must open with.

A message Claude Code's model sends there (`msgV` 1) is stored in the agent's relay inbox
as mail from the Claude Code session's relay agent (the session whose process connected:
the agent whose Claude Code inbox relay knows for that pid), tagged `VIA_CLAUDE_CODE`, and
reaches the agent by its own mechanism; relay never writes such a message back into a
Claude Code inbox (relayd.arrival.claude_inbox skips it), so nothing loops. A line of an
unknown `msgV`, an unauthenticated writer, or a process relay cannot name are refused with
one line in relayd's log.

Records are kept in step every `EVERY` seconds: made for agents that appear, removed for
agents archived or gone, all removed when relayd stops, and those of a relayd that died
(its holders died with it) removed when a relayd next sees that registry (`sweep`); a
record of another uid's, or a file relay did not write, is never touched.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass

import structlog

from .. import __version__
from ..layout import sha256_hex
from ..store import Store
from . import claude_inbox_format as fmt
from .program_process import started

EVERY = 2.0  # seconds between two reconciliations of the records with the team
VIA_CLAUDE_CODE = fmt.VIA_CLAUDE_CODE
READ_TIMEOUT = 5.0
HOLDER_START = 10.0  # seconds a holder may take to listen before relay gives up on it (and tries again later)
MAX_CONNECTION_BYTES = 4 * fmt.MAX_LINE
# The holder: listen on the socket relayd bound (its fd in RELAY_FD), say so, and sleep until relayd ends.
_HOLDER = (
    "import ctypes,os,signal,socket;ctypes.CDLL(None).prctl(1,signal.SIGTERM);"
    "os.getppid()==int(os.environ['RELAY_PARENT']) or os._exit(1);"
    "s=socket.socket(fileno=int(os.environ['RELAY_FD']));s.listen(16);os.write(1,b'ok');"
    "os.execvp('sleep',['sleep','infinity'])"
)

log = structlog.get_logger()


@dataclass
class Peer:
    """One relay agent's record in one sessions directory, and the holder behind it."""

    agent: str
    sessions_dir: str
    socket_dir: str
    holder: subprocess.Popen
    listener: socket.socket
    path: str  # the socket
    record: str
    key: str
    token: str


def _peer_ids(conn: socket.socket) -> tuple[int, int]:
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid


def _own_dir(path: str, closed: int) -> bool:
    """A directory of this user's with none of the `closed` mode bits."""
    try:
        found = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() and not stat.S_IMODE(found.st_mode) & closed


def _write_private(path: str, data: bytes) -> None:
    tmp = f"{path}.relay-tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _ours(path: str) -> bool:
    """A file of this user's that relay wrote (a record naming relay, a key beside one)."""
    try:
        if os.lstat(path).st_uid != os.getuid():
            return False
        with open(path, "rb") as fh:
            return json.loads(fh.read()).get("entrypoint") == "relay"
    except (OSError, ValueError, AttributeError):
        return False


class PeerAgents:
    """relayd's records of its agents in Claude Code's registry, and the sockets behind them."""

    def __init__(self, store_root: str) -> None:
        self.store_root = store_root
        self.peers: dict[tuple[str, str], Peer] = {}  # (agent, sessions_dir) -> its peer
        self.swept: set[str] = set()  # the sessions directories cleared of an earlier relayd's records
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claude-peer-agents", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    # -- keeping the records in step with the team --------------------------------------

    def _run(self) -> None:
        # One long-lived thread spawns every holder: a holder dies with the thread that made it.
        with Store(self.store_root) as store:
            try:
                while not self._stop.is_set():
                    try:
                        self.reconcile(store)
                    except Exception as exc:  # the registry is a convenience: never end relayd for it
                        log.warning("Claude Code peer records not kept in step", error=str(exc))
                    self._stop.wait(EVERY)
            finally:
                for key in list(self.peers):
                    self._remove(key)

    def wanted(self, store: Store) -> dict[tuple[str, str], tuple[str, dict]]:
        """(agent, sessions_dir) -> (socket dir, what its record says), for every agent
        not archived and not itself a Claude Code session with an inbox, in every sessions
        directory of a Claude Code session relay writes to."""
        # deferred import: the roster only in relayd's registry thread
        from ..agents.roster import agent_states
        from .claude_inbox import DOOR, current

        places: set[tuple[str, str]] = set()
        claude_agents: set[str] = set()
        for name in store.known_agents():
            with store.agent_dir(name) as agent:
                door = current(agent) if agent.exists(DOOR) else None
            if door is not None and door.socket and not door.unusable:
                claude_agents.add(name)
                places.add((door.sessions_dir, os.path.dirname(door.socket)))
        if not places:
            return {}  # no Claude Code session to be listed in (the common case: one stat an agent)
        states = agent_states(store)
        wanted = {}
        for state in states:
            if state.archived or state.name in claude_agents:
                continue
            for sessions_dir, socket_dir in places:
                wanted[(state.name, sessions_dir)] = (socket_dir, {"program": state.program, "task": state.task, "status": state.status})
        return wanted

    def reconcile(self, store: Store) -> None:
        wanted = self.wanted(store)
        for sessions_dir in {d for _, d in wanted} - self.swept:
            sweep(sessions_dir, {p.record for p in self.peers.values()})
            self.swept.add(sessions_dir)
        for key in [k for k in self.peers if k not in wanted or self.peers[k].holder.poll() is not None]:
            self._remove(key)
        for key, (socket_dir, about) in wanted.items():
            if key not in self.peers:
                peer = self._publish(key[0], key[1], socket_dir, about)
                if peer is not None:
                    self.peers[key] = peer
                    threading.Thread(target=self._serve, args=(peer,), name=f"claude-peer {peer.agent}", daemon=True).start()

    def _publish(self, name: str, sessions_dir: str, socket_dir: str, about: dict) -> Peer | None:
        # The socket directory as Claude Code keeps its own (0700); the registry this user's
        # and writable by nobody else (its key files are 0600 each).
        if not _own_dir(socket_dir, 0o077) or not _own_dir(sessions_dir, 0o022):
            log.warning("not listing a relay agent in Claude Code: its directories are not this user's own", agent=name, sessions=sessions_dir, sockets=socket_dir)
            return None
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path = os.path.join(socket_dir, f"{os.getpid()}-{sha256_hex(f'{self.store_root}/{name}'.encode())[:8]}.sock")
        if len(os.fsencode(path)) > fmt.MAX_SOCKET_PATH:
            listener.close()
            return None
        if os.path.lexists(path) and stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)  # this relayd's own name, left by an earlier process with its pid
        old = os.umask(0o177)
        try:
            listener.bind(path)
        finally:
            os.umask(old)
        holder = subprocess.Popen([sys.executable, "-S", "-c", _HOLDER], pass_fds=(listener.fileno(),), stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RELAY_PARENT": str(os.getpid()), "RELAY_FD": str(listener.fileno())})
        ready, _, _ = select.select([holder.stdout], [], [], HOLDER_START) if holder.stdout else ([], [], [])
        said = holder.stdout.read(2) if ready and holder.stdout else b""
        if said != b"ok":
            holder.kill()
            holder.wait()
            listener.close()
            os.unlink(path)
            log.warning("no holder process for a relay agent's Claude Code record", agent=name)
            return None
        holder.stdout.close()
        start = started(holder.pid) or ""
        token = secrets.token_hex(16)
        record_path = os.path.join(sessions_dir, fmt.record_name(holder.pid))
        key_path = os.path.join(sessions_dir, fmt.key_name(holder.pid, path))
        now_ms = int(time.time() * 1000)
        program = about.get("program") or "program"
        record = {"pid": holder.pid, "sessionId": str(uuid.uuid4()), "cwd": os.getcwd(), "startedAt": now_ms, "procStart": start,
                  "version": __version__, "peerProtocol": fmt.PEER_PROTOCOL, "kind": "interactive", "entrypoint": "relay",
                  "messagingSocketPath": path, "name": name, "nameSource": "user", "nameSince": now_ms, "status": "idle",
                  "updatedAt": now_ms, "agent": program, "state": about.get("status") or "relay agent",
                  "detail": f"{name}: a {program} agent on the relay team" + (f", working on: {about['task']}" if about.get("task") else "")}
        _write_private(key_path, json.dumps({"peerToken": token, "procStart": start, "entrypoint": "relay"}).encode())
        _write_private(record_path, json.dumps(record).encode())
        return Peer(agent=name, sessions_dir=sessions_dir, socket_dir=socket_dir, holder=holder, listener=listener, path=path, record=record_path, key=key_path, token=token)

    def _remove(self, key: tuple[str, str]) -> None:
        peer = self.peers.pop(key)
        for path in (peer.record, peer.key):
            if _ours(path):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        try:
            peer.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        peer.listener.close()
        try:
            if stat.S_ISSOCK(os.lstat(peer.path).st_mode):
                os.unlink(peer.path)
        except OSError:
            pass
        peer.holder.kill()
        peer.holder.wait()

    # -- what Claude Code writes to an agent's socket ------------------------------------

    def _serve(self, peer: Peer) -> None:
        with Store(self.store_root) as store:
            while True:
                try:
                    conn, _ = peer.listener.accept()
                except OSError:
                    return
                with conn:
                    try:
                        self._read(store, peer, conn)
                    except Exception as exc:
                        log.warning("a message to a relay agent from Claude Code failed", agent=peer.agent, error=str(exc))

    def _read(self, store: Store, peer: Peer, conn: socket.socket) -> None:
        pid, uid = _peer_ids(conn)
        if uid != os.getuid():
            return
        conn.settimeout(READ_TIMEOUT)
        reader, total, authed = fmt.LineReader(), 0, False
        while total < MAX_CONNECTION_BYTES:
            try:
                data = conn.recv(65536)
            except (TimeoutError, OSError):
                return
            if not data:
                return
            total += len(data)
            for frame in reader.feed(data):
                if frame.get("type") == "auth":
                    authed = secrets.compare_digest(str(frame.get("token", "")), peer.token)
                    continue
                if frame.get("type") != "user":
                    continue
                why = refused(frame, authed)
                if why:
                    log.warning("a message from Claude Code not taken", agent=peer.agent, why=why)
                    continue
                take(store, peer.agent, pid, frame)


def sweep(sessions_dir: str, keep: set[str]) -> None:
    """Remove the records (their key files and sockets) a relayd that is gone left in
    `sessions_dir`: files relay wrote (`entrypoint` "relay"), of this user, whose holder no
    longer runs; `keep` is this relayd's own."""
    try:
        names = os.listdir(sessions_dir)
    except OSError:
        return
    for name in names:
        path = os.path.join(sessions_dir, name)
        if not name.endswith(".json") or path in keep or not _ours(path):
            continue
        try:
            with open(path, "rb") as fh:
                record = fmt.decode_record(fh.read())
        except OSError:
            continue
        if record is None or (record.procStart and started(record.pid) == record.procStart):
            continue
        sock = record.messagingSocketPath or ""
        for stale in (path, os.path.join(sessions_dir, fmt.key_name(record.pid, sock)) if sock else ""):
            if stale and _ours(stale):
                try:
                    os.unlink(stale)
                except OSError:
                    pass
        try:
            if sock and stat.S_ISSOCK(os.lstat(sock).st_mode) and os.lstat(sock).st_uid == os.getuid():
                os.unlink(sock)
        except OSError:
            pass


def refused(frame: dict, authed: bool) -> str | None:
    """Why relay does not take this line as a message (one line), or None."""
    if not authed:
        return "the writer did not open with the token of relay's key file"
    if frame.get("msgV") != fmt.MSG_V:
        return f"a message of msgV {frame.get('msgV')!r}; relay knows {fmt.MSG_V} (Claude Code {fmt.TESTED_VERSION})"
    content = (frame.get("message") or {}).get("content")
    if not isinstance(content, str) or not content.strip():
        return "a message without text"
    return None


def sender_of(store: Store, pid: int) -> str | None:
    """The relay agent whose Claude Code session is process `pid`."""
    from .claude_inbox import read_door

    running = started(pid)
    for name in store.known_agents():
        with store.agent_dir(name) as agent:
            door = read_door(agent)
        if door is not None and door.pid == pid and door.proc_start and door.proc_start == running:
            return name
    return None


def take(store: Store, to: str, pid: int, frame: dict) -> str | None:
    """Store a Claude Code model's message to relay agent `to` in its inbox, from the relay
    agent of the sending session; the stored id, or None when relay cannot name the sender."""
    from ..inbox.send import SendParams, send  # deferred: the inbox's writer only when a message comes

    sender = sender_of(store, pid)
    if sender is None:
        log.warning("a message from Claude Code not taken: its session is no relay agent's", agent=to, pid=pid)
        return None
    body = fmt.peer_body(frame["message"]["content"]) or frame["message"]["content"].strip()
    subject = body.splitlines()[0][:120]
    result = send(store, SendParams(agent=sender, to=[to], subject=subject, body=body, tags=[VIA_CLAUDE_CODE]))
    messages = getattr(result, "messages", None) or []
    return messages[0].id if messages else None


_active: PeerAgents | None = None


def start(store_root: str) -> PeerAgents:
    global _active
    _active = PeerAgents(store_root)
    _active.start()
    return _active


def stop() -> None:
    global _active
    if _active is not None:
        _active.close()
        _active = None
