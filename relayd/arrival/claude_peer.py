"""relayd as a peer of Claude Code sessions: the socket Claude Code's receipts come back to.

When relay writes mail into a session's inbox (relayd.arrival.claude_inbox), the peer
message names a reply address (`from: uds:<path>`). Claude Code answers there with
`peer_message_status` receipts: held for the person's approval, then delivered or
denied; expired, refused, dropped. It sends them only to a socket in its own socket
directory whose name ends in `.sock`, and only to the process that wrote the message
(the kernel's SO_PEERCRED pid of the connection that brought it). So relayd listens, in
each session's socket directory it writes to, on `<relayd's pid>-<8 hex>.sock` itself (0600,
in a directory checked as Claude Code checks its own: this user's, 0700), and only
relayd's own writes name it; a client writing in direct mode names no reply address.

A receipt is believed only from a connection of this user whose process is the session
relay wrote that message to (its door's pid): the receipt goes to the delivery log
(relayd.delivery.receipts `door_receipt`) as a `door` step, which `track`, `send --wait`
and `status` show with its time.

The sockets relayd made are listed in `<store>/claude-peer` (path, pid, start time); at
start relayd removes those a relayd that is gone left behind, and at stop its own.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import threading
from typing import Callable

import structlog

from .. import layout
from ..store import Store
from . import claude_inbox_format as fmt
from .program_process import started

LEDGER = layout.CLAUDE_PEER  # the reply sockets relayd made, one a line: path, pid, start time
READ_TIMEOUT = 5.0  # a connection that says nothing this long is closed
MAX_CONNECTION_BYTES = 4 * fmt.MAX_LINE

log = structlog.get_logger()

_active: "ReplySockets | None" = None


def reply_address(directory: str) -> str | None:
    """The socket in `directory` Claude Code's receipts should go to, made on first use;
    None when this process does not listen (direct mode) or the directory is not safe."""
    return _active.address_in(directory) if _active is not None else None


def _peer_ids(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end, from the kernel."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid


def _safe_directory(directory: str) -> str | None:
    """Why relay may not listen in `directory`; None when it is this user's own, 0700."""
    try:
        found = os.lstat(directory)
    except OSError as exc:
        return f"{directory}: {exc.strerror}"
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or stat.S_IMODE(found.st_mode) & 0o077:
        return f"{directory} is not a private directory of this user"
    return None


class ReplySockets:
    """relayd's listening sockets for Claude Code's receipts, one per socket directory,
    each served by a thread of its own (receipts are few, and a Store is per thread)."""

    def __init__(self, store_root: str, on_receipt: Callable[[Store, int, fmt.Receipt], None]) -> None:
        self.store_root = store_root
        self.on_receipt = on_receipt  # (store, the sending session's pid, the receipt)
        self.pid = os.getpid()
        self.start = started(self.pid) or ""
        # `<pid>-<8 hex>.sock`, a name of the shape Claude Code gives its own sockets, never
        # one of a session's (`<pid>.sock`); the hex tells two stores' relayds apart.
        self.name = f"{self.pid}-{layout.sha256_hex(os.fsencode(store_root))[:8]}.sock"
        self._lock = threading.Lock()
        self._sockets: dict[str, socket.socket] = {}  # directory -> listening socket
        self._refused: dict[str, str] = {}  # directory -> why not (said once)
        self.closed = False

    def address_in(self, directory: str) -> str | None:
        directory = os.path.abspath(directory)
        with self._lock:
            if self.closed or directory in self._refused:
                return None
            if directory in self._sockets:
                return os.path.join(directory, self.name)
            why = _safe_directory(directory)
            path = os.path.join(directory, self.name)
            if why is None and len(os.fsencode(path)) > fmt.MAX_SOCKET_PATH:
                why = f"{path} is too long for a Unix socket"
            if why is None:
                try:
                    self._sockets[directory] = self._bind(path)
                except OSError as exc:
                    why = f"cannot listen on {path}: {exc.strerror}"
            if why is not None:
                self._refused[directory] = why
                log.warning("no receipts from Claude Code", directory=directory, why=why)
                return None
            self._note(path)
        threading.Thread(target=self._serve, args=(self._sockets[directory],), name=f"claude-peer {directory}", daemon=True).start()
        return path

    def _bind(self, path: str) -> socket.socket:
        if os.path.lexists(path):
            _unlink_socket(path)  # this pid's own name: left by an earlier process with our pid
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            sock.bind(path)  # 0600 from the moment it exists, as Claude Code makes its own
        except OSError:
            sock.close()
            raise
        finally:
            os.umask(old)
        sock.listen(16)
        return sock

    def _note(self, path: str) -> None:
        with open(os.path.join(self.store_root, LEDGER), "a", encoding="utf-8") as fh:
            fh.write(f"{path} {self.pid} {self.start}\n")

    def _serve(self, listener: socket.socket) -> None:
        with Store(self.store_root) as store:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return  # closed at stop
                with conn:
                    try:
                        self._read(store, conn)
                    except Exception as exc:  # one bad connection must not end the listener
                        log.warning("a connection on relay's Claude Code socket failed", error=str(exc))

    def _read(self, store: Store, conn: socket.socket) -> None:
        pid, uid = _peer_ids(conn)
        if uid != os.getuid():
            return  # another user's process: not a word of it is read
        conn.settimeout(READ_TIMEOUT)
        reader, total = fmt.LineReader(), 0
        while total < MAX_CONNECTION_BYTES:
            try:
                data = conn.recv(65536)
            except (TimeoutError, OSError):
                return
            if not data:
                return
            total += len(data)
            for frame in reader.feed(data):
                receipt = fmt.receipt(frame)
                if receipt is not None:
                    self.on_receipt(store, pid, receipt)

    def close(self) -> None:
        """Stop listening and remove this process's sockets (and its lines in the ledger)."""
        with self._lock:
            self.closed = True
            sockets, self._sockets = self._sockets, {}
        for directory, sock in sockets.items():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
            _unlink_socket(os.path.join(directory, self.name))
        sweep(self.store_root, also=(self.pid, self.start))


def _unlink_socket(path: str) -> None:
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


def sweep(store_root: str, also: tuple[int, str] | None = None) -> None:
    """Remove the reply sockets of relayd processes that are gone (and `also`'s: a pid and
    start time stopping now); keep the ledger's lines of the ones still running."""
    path = os.path.join(store_root, LEDGER)
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return
    kept = []
    for line in lines:
        fields = line.split()
        if len(fields) != 3 or not fields[1].isdigit():
            continue
        pid, start = int(fields[1]), fields[2]
        if (pid, start) != also and started(pid) == start:
            kept.append(line)
        else:
            _unlink_socket(fields[0])
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("".join(f"{line}\n" for line in kept))
    os.replace(tmp, path)


def start(store_root: str, on_receipt: Callable[[Store, int, fmt.Receipt], None]) -> ReplySockets:
    """Listen for Claude Code's receipts in this process (relayd), after sweeping what an
    earlier relayd left behind."""
    global _active
    sweep(store_root)
    _active = ReplySockets(store_root, on_receipt)
    return _active


def stop() -> None:
    global _active
    if _active is not None:
        _active.close()
        _active = None
