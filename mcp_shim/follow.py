"""Following one agent's inbox so new mail can be pushed into the session.

Every message lands in `agents/<role>/inbox.jsonl`, whichever process wrote it, so the
inbox file is the source of what to announce: `InboxTail` keeps a byte offset into it and
hands out the complete lines written since. What wakes the tail up is either relayd
(a subscription on its socket, `topics: ["inbox"]` for this agent) or, while no daemon
serves this store, inotify on the agent's directory (the directory, so that a rotation,
which renames the file, is seen too). The daemon is looked for again every few seconds.

Bursts are coalesced: after a quiet spell a new message is announced at once, but
notifications are spaced at least MIN_INTERVAL_SECONDS apart and whatever arrives in
between goes out as one, so a flood of mail costs the session a few events, not hundreds.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from typing import Any, Callable

import msgspec

from relayd import __version__, layout, protocol

from . import logs

MIN_INTERVAL_SECONDS = 0.5  # between two notifications; what arrives meanwhile is batched
MAX_LISTED = 5  # messages described in one notification; the rest are counted
PREVIEW_CHARS = 160
DAEMON_RETRY_SECONDS = 2.0
BACKSTOP_SECONDS = 2.0  # re-read the inbox even without a wake-up (a lost watch, a reset store)
_READ_CHUNK = 256 * 1024
_MAX_LINE = 16 << 20  # a 256 KiB body stays far below this even with every character escaped
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


_RANK = {"low": 0, "normal": 1, "high": 2, "urgent": 3}


class Batch:
    """New messages waiting to be announced: the first few kept whole, the rest counted,
    so a flood of mail costs neither memory nor a long notification."""

    def __init__(self) -> None:
        self.listed: list[dict[str, Any]] = []
        self.total = 0
        self.priority = "low"

    def add(self, message: dict[str, Any]) -> None:
        self.total += 1
        if len(self.listed) < MAX_LISTED:
            self.listed.append(message)
        priority = str(message.get("priority") or "normal")
        if _RANK.get(priority, 1) > _RANK.get(self.priority, 1):
            self.priority = priority

    def __bool__(self) -> bool:
        return self.total > 0


class InboxTail:
    """New complete lines of an inbox since the last look, across rotations."""

    def __init__(self, agent_dir: str, start_at_end: bool = True) -> None:
        self.path = os.path.join(agent_dir, layout.INBOX)
        self.fd = -1
        self.offset = 0
        self._open(at_end=start_at_end)

    def _open(self, at_end: bool) -> None:
        try:
            self.fd = os.open(self.path, _O_READ)
        except OSError:
            self.fd = -1
            return
        self.offset = os.fstat(self.fd).st_size if at_end else 0

    def _read_into(self, batch: Batch) -> None:
        size = _READ_CHUNK
        while True:
            chunk = os.pread(self.fd, size, self.offset)
            end = chunk.rfind(b"\n")
            if end < 0:
                if len(chunk) < size:
                    return  # nothing new, or a line still being written: wait for its newline
                if size < _MAX_LINE:
                    size *= 2  # one long message: read further
                    continue
                self.offset += len(chunk)  # longer than any message can be: not one of ours
                continue
            for line in chunk[: end + 1].split(b"\n"):
                if line:
                    _decode_into(line, batch)
            self.offset += end + 1
            size = _READ_CHUNK

    def drain(self, batch: Batch) -> None:
        """Add the messages appended since the last call to `batch` (the oldest first)."""
        if self.fd >= 0:
            self._read_into(batch)
        try:
            current = os.stat(self.path, follow_symlinks=False).st_ino
        except OSError:
            current = None
        if self.fd < 0 or current != os.fstat(self.fd).st_ino:
            # Rotated (or created): what was left in the old file is read; the new one starts at 0.
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            if current is not None:
                self._open(at_end=False)
                if self.fd >= 0:
                    self._read_into(batch)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _decode_into(line: bytes, batch: Batch) -> None:
    try:
        message = msgspec.json.decode(line)
    except msgspec.DecodeError:
        return  # a corrupt line is the reader's to report; nothing to announce
    if isinstance(message, dict) and "id" in message:
        batch.add(message)


def _clip(text: Any, width: int) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def channel_event(batch: Batch) -> dict[str, Any]:
    """The `notifications/claude/channel` params announcing a batch (one message or a burst)."""
    first = batch.listed[0]
    meta = {"from": str(first.get("from", "")), "message_id": str(first.get("id", "")), "priority": batch.priority}
    if first.get("thread"):
        meta["thread"] = str(first["thread"])
    if batch.total == 1:
        subject, preview = _clip(first.get("subject"), 120), _clip(first.get("body"), PREVIEW_CHARS)
        lines = [f"New message from {first.get('from')} ({batch.priority}): {subject}"]
        if preview != subject:  # a subject defaulted from the body would only repeat it
            lines.append(preview)
        lines.append("Call check_inbox to read it.")
        return {"content": "\n".join(lines), "meta": meta}
    meta["count"] = str(batch.total)
    lines = [f"{batch.total} new messages:"]
    for m in batch.listed:
        lines.append(f"- {m.get('from')}: {_clip(m.get('subject'), 80)} — {_clip(m.get('body'), 60)}")
    if batch.total > len(batch.listed):
        lines.append(f"(+{batch.total - len(batch.listed)} more)")
    lines.append("Call check_inbox to read them.")
    return {"content": "\n".join(lines), "meta": meta}


class DaemonLink:
    """A subscription to relayd's inbox events for one agent (protocol v1, `relayd.protocol`)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.conn = protocol.Connection("client")
        self.frames: list[Any] = []

    @classmethod
    def connect(cls, socket_path: str, store_dir: str, agent: str) -> "DaemonLink | None":
        """A link when relayd serves `store_dir` at `socket_path`; None when it does not."""
        if not os.path.exists(socket_path):
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(2.0)
        try:
            sock.connect(socket_path)
            link = cls(sock)
            link.send(protocol.Hello(version=protocol.VERSION, client=f"relay-mcp {__version__}"))
            hello = link.next_frame()
            if not isinstance(hello, protocol.Hello) or not hello.store:
                raise ConnectionError(f"relayd answered hello with {type(hello).__name__}")
            if os.path.realpath(hello.store) != os.path.realpath(store_dir):
                raise ConnectionError(f"relayd serves another store ({hello.store})")
            link.send(protocol.Subscribe(topics=["inbox"], agent=agent))
            answer = link.next_frame()
            if not isinstance(answer, protocol.Subscribed):
                raise ConnectionError(f"relayd answered subscribe with {type(answer).__name__}")
        except (OSError, ConnectionError) as exc:
            logs.debug(f"no relayd subscription: {exc}")
            sock.close()
            return None
        sock.setblocking(False)
        return link

    def send(self, frame: Any) -> None:
        self.sock.sendall(self.conn.send(frame))

    def next_frame(self) -> Any:
        """The next frame, blocking (used during the handshake only)."""
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("relayd closed the connection")
            self.frames.extend(self.conn.receive_data(data))
        return self.frames.pop(0)

    def events(self) -> int:
        """How many inbox events are readable now; ConnectionError when relayd went away."""
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return 0
        if not data:
            raise ConnectionError("relayd closed the connection")
        self.frames.extend(self.conn.receive_data(data))
        if self.conn.closed:
            raise ConnectionError("relayd sent something that is not protocol v1")
        count = sum(isinstance(f, protocol.EventFrame) for f in self.frames)
        self.frames.clear()
        return count

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()


class InboxWatch:
    """inotify on the agent's directory (created on demand: the agent may not exist yet)."""

    def __init__(self, agent_dir: str) -> None:
        from inotify_simple import INotify, flags

        self.inotify = INotify()
        mask = flags.MODIFY | flags.CREATE | flags.MOVED_TO | flags.DELETE_SELF | flags.MOVE_SELF
        try:
            self.watch = self.inotify.add_watch(agent_dir, mask)
        except OSError:
            self.inotify.close()
            raise

    def fileno(self) -> int:
        return self.inotify.fileno()

    def consume(self) -> bool:
        """Read pending events; False when the directory itself is gone (watch lost)."""
        from inotify_simple import flags

        alive = True
        for event in self.inotify.read(timeout=0):
            if event.mask & (flags.IGNORED | flags.DELETE_SELF | flags.MOVE_SELF):
                alive = False
        return alive

    def close(self) -> None:
        self.inotify.close()


class Follower(threading.Thread):
    """Background thread: wake-ups from relayd or inotify -> coalesced channel events."""

    def __init__(self, store_dir: str, socket_path: str, agent: str, emit: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(name="relay-follow", daemon=True)
        self.store_dir = store_dir
        self.socket_path = socket_path
        self.agent = agent
        self.agent_dir = os.path.join(store_dir, layout.AGENTS, agent)
        self.emit = emit
        self.tail = InboxTail(self.agent_dir)
        self.link: DaemonLink | None = None
        self.watch: InboxWatch | None = None
        self.pending = Batch()
        self.emit_at = 0.0
        self.last_emit = 0.0
        self.next_daemon_try = 0.0
        self._stop = threading.Event()
        self.mode = "starting"  # "daemon" or "inotify", for logs and tests
        self.channel_configured = True

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        try:
            self._announce_waiting()
            while not self._stop.is_set():
                self._step()
        except Exception:  # the session must go on without push delivery rather than die
            import traceback

            logs.info(f"inbox follower stopped:\n{traceback.format_exc()}")

    def _announce_waiting(self) -> None:
        """Mail that arrived before this session started is announced once, as a count."""
        from relayd.client import Client
        from relayd.errors import RelayError

        try:
            with Client(self.store_dir, self.socket_path, name="relay-mcp") as client:
                waiting = client.call("unread", {"agent": self.agent})["unread"]
        except RelayError as exc:
            logs.debug(f"no unread count at start: {exc}")
            return
        if waiting > 0 and self._arrival_is_channel():
            self.last_emit = time.monotonic()
            self.emit(
                {
                    "content": f"{waiting} unread message{'s' if waiting != 1 else ''} waiting from before this session. Call check_inbox to read {'them' if waiting != 1 else 'it'}.",
                    "meta": {"count": str(waiting)},
                }
            )

    def _connect(self, now: float) -> None:
        if self.link is None and now >= self.next_daemon_try:
            self.next_daemon_try = now + DAEMON_RETRY_SECONDS
            self.link = DaemonLink.connect(self.socket_path, self.store_dir, self.agent)
            if self.link is not None:
                logs.info(f"following {self.agent}'s inbox through relayd")
                self.mode = "daemon"
                self._close_watch()
                self._collect()  # whatever arrived while nothing was watching
        if self.link is None and self.watch is None:
            try:
                self.watch = InboxWatch(self.agent_dir)
            except OSError:
                self.watch = None  # no such agent directory (yet); the backstop keeps looking
            else:
                if self.mode != "inotify":
                    logs.info(f"following {self.agent}'s inbox with inotify (relayd is not running)")
                self.mode = "inotify"
                self._collect()

    def _close_watch(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    def _collect(self) -> None:
        was_empty = not self.pending
        self.tail.drain(self.pending)
        if was_empty and self.pending:
            # After a quiet spell the first message goes out at once; during a burst the rest wait.
            self.emit_at = max(time.monotonic(), self.last_emit + MIN_INTERVAL_SECONDS)

    def _step(self) -> None:
        now = time.monotonic()
        self._connect(now)
        source = self.link or self.watch
        deadlines = [now + BACKSTOP_SECONDS]
        if self.link is None:
            deadlines.append(self.next_daemon_try)
        if self.pending:
            deadlines.append(self.emit_at)
        timeout = max(0.0, min(deadlines) - now)
        ready = False
        if source is not None:
            poller = select.poll()
            poller.register(source.fileno(), select.POLLIN)
            ready = bool(poller.poll(timeout * 1000))
        else:
            self._stop.wait(timeout)
        if ready and self.link is not None:
            try:
                self.link.events()  # any inbox event for us means: look at the file
            except (ConnectionError, OSError):
                logs.info("relayd went away; falling back to inotify")
                self.link.close()
                self.link = None
                self.next_daemon_try = 0.0
        elif ready and self.watch is not None:
            if not self.watch.consume():
                self._close_watch()
        self._collect()
        if self.pending and time.monotonic() >= self.emit_at:
            batch, self.pending = self.pending, Batch()
            self.last_emit = time.monotonic()
            if self._arrival_is_channel():
                self.emit(channel_event(batch))

    def _arrival_is_channel(self) -> bool:
        """DESIGN §4: an agent has one arrival mechanism. Push unless another one is set
        (`register --notify tmux:...`, `hook`, `none`, ...), so mail is not announced twice."""
        try:
            fd = os.open(os.path.join(self.agent_dir, layout.META), _O_READ)
            try:
                notify = msgspec.json.decode(os.read(fd, 1 << 20)).get("notify")
            finally:
                os.close(fd)
        except (OSError, msgspec.DecodeError, AttributeError):
            return True  # no readable meta: nothing else is configured
        wanted = notify in (None, "", "channel")
        if wanted != self.channel_configured:
            self.channel_configured = wanted
            if not wanted:
                logs.info(f"{self.agent} gets mail through notify={notify}; no channel events")
        return wanted
