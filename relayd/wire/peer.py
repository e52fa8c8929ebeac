"""Whose socket is it: relay talks over a Unix socket only to a process of its own user.

A socket's name in a directory others may add to (a sticky `/tmp`, where docs/daemon.md
lets relayd listen) can be bound by another user while relayd is stopped. A client that
connected there would hand that user its mail and print whatever it answered. So before a
client sends a byte it checks twice:

1. the socket file's owner, with `lstat` (a symbolic link counts as its maker's, so a link
   planted by another user is refused without being followed), and
2. once connected, the uid of the process at the other end, from the kernel
   (`SO_PEERCRED`): this holds even when the name was swapped between the two steps, or
   a link of ours leads to someone else's socket.

Either one not ours is a refusal (`ForeignSocket`), whose sentence names the socket and
its owner. Both checks are one system call each and need only the standard library's C
modules, so relayctl's fast path runs them on every connection
(tests/client/test_startup_imports.py).

`connect` is the whole thing for any Unix socket relay writes to (relayd's in
`relayd.wire.connection`, which every client goes through; an agent program's own inbox
socket); `check_file` and `check_peer` are its two halves for a caller that connects in
its own way (an event loop's socket).
"""

from __future__ import annotations

import os
import sys

import _socket  # (socket.py costs relayctl start-up for nothing it needs)

TYPE_CHECKING = False  # typing itself costs relayctl ~2 ms of start-up
if TYPE_CHECKING:
    from typing import Any


class ForeignSocket(Exception):
    """The socket at `path` (its file, or the process answering on it) belongs to the user
    `uid`, not to the user running relay. `str()` is the one line a person is shown."""

    def __init__(self, path: str, uid: int, what: str = "socket") -> None:
        self.path = path
        self.uid = uid
        self.owner = user_name(uid)
        self.what = what  # "socket" for its file, "process" for the one answering on it
        held = f"belongs to {self.owner}" if what == "socket" else f"is answered by a process of {self.owner}"
        super().__init__(f"{path} {held} (uid {uid}), not to you: relay does not talk to another user's socket")


def user_name(uid: int) -> str:
    """The login name of `uid`, or `uid N` when it has none."""
    # deferred imports: relayctl's fast path loads this module; pwd only for a refusal's sentence
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def check_file(path: str) -> None:
    """Raise ForeignSocket when the file at `path` (not followed) is another user's.
    OSError as lstat raises it (FileNotFoundError: nothing there)."""
    uid = os.lstat(path).st_uid
    if uid != os.geteuid():
        raise ForeignSocket(path, uid)


def peer_uid(sock: Any) -> int:
    """The uid of the process at the other end of a connected Unix socket (SO_PEERCRED:
    the kernel's record of who bound or connected it)."""
    raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
    return int.from_bytes(raw[4:8], sys.byteorder)


def check_peer(sock: Any, path: str) -> None:
    """Raise ForeignSocket when the process answering on `sock` (connected to `path`) runs
    as another user."""
    uid = peer_uid(sock)
    if uid != os.geteuid():
        raise ForeignSocket(path, uid, "process")


def connect(path: str, timeout: float | None) -> Any:
    """A stream socket connected to `path` and answered by a process of this user, nothing
    sent yet. Raises ForeignSocket for another user's socket (nothing was sent to it), and
    the OSError of lstat or connect otherwise (FileNotFoundError, ConnectionRefusedError,
    TimeoutError, PermissionError, ...)."""
    check_file(path)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        check_peer(sock, path)
    except BaseException:
        sock.close()
        raise
    return sock
