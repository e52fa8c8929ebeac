"""Starting and stopping safely: the store lock, the listening socket, systemd, logging.

* One daemon per store: an exclusive flock on `<store>/relayd.lock`, held for the process
  lifetime (the kernel releases it on any exit, so there is no stale-PID guessing).
* The socket: a leftover file that does not answer is removed; one that answers means
  another daemon owns that path. The directory is 0700 (or, like /tmp, sticky and
  owned by root or us, with the socket's name free or ours and not a symlink) and the
  socket 0600 from bind on.
* systemd: `sd_notify` messages and socket activation (`LISTEN_FDS`).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import stat
import sys

import structlog

from relayd import layout
from relayd.errors import StartupError
from relayd.fsio import Dir


# -- one daemon per store ----------------------------------------------------------------


def acquire_store_lock(root: Dir) -> int:
    """The held lock fd. Fails with a message naming the running daemon's pid."""
    fd = root.open(layout.DAEMON_LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise StartupError(f"relayd is already running for store {root.path}{who}; stop it first or use another --dir") from None
        raise StartupError(f"cannot lock {root.path}/{layout.DAEMON_LOCK}: {exc.strerror}") from None
    # The pid is only for the message above; the flock is what counts.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


# -- the listening socket ------------------------------------------------------------------


def inherited_listener() -> socket.socket | None:
    """The socket systemd passed us (socket activation), if any."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    count = int(os.environ.get("LISTEN_FDS", "0") or 0)
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(key, None)
    if count < 1:
        return None
    sock = socket.socket(fileno=3)  # SD_LISTEN_FDS_START
    sock.set_inheritable(False)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise StartupError("the socket systemd passed is not a Unix stream socket; check relayd.socket")
    return sock


def _prepare_directory(path: str) -> None:
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StartupError(f"cannot create socket directory {directory}: {exc.strerror}") from None
    info = os.stat(directory)
    private = info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if private:
        return
    if info.st_mode & stat.S_ISVTX and info.st_uid in (0, os.getuid()):
        _own_or_absent(path)  # /tmp: others may add names, but not remove or rename ours
        return
    raise StartupError(
        f"socket directory {directory} is writable by others or not yours; "
        "use a private directory (e.g. $XDG_RUNTIME_DIR/relay) with --socket or RELAY_SOCKET"
    )


def _own_or_absent(path: str) -> None:
    """In a sticky directory anyone may write, the socket's name must be free or hold a
    socket of ours: not a symlink, not someone else's file (whoever made it could listen
    there in our place, or point us at their own target)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise StartupError(f"{path} is a symbolic link in a directory others can write to; remove it or choose another --socket")
    if info.st_uid != os.getuid():
        raise StartupError(f"{path} belongs to another user (uid {info.st_uid}) in a directory others can write to; choose another --socket")


def _answers(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
        return True
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return True  # something is there and it is not simply dead: do not remove it
    finally:
        probe.close()


def bind_listener(path: str) -> socket.socket:
    """A listening socket at `path`, 0600 from the moment it exists."""
    if not layout.socket_path_fits(path):
        raise StartupError(
            f"socket path is too long for a Unix socket ({len(os.fsencode(path))} bytes, at most {layout.MAX_SOCKET_PATH}): {path}; "
            "give a shorter one with --socket PATH (or RELAY_SOCKET), or set XDG_RUNTIME_DIR"
        )
    _prepare_directory(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(info.st_mode):
            raise StartupError(f"{path} exists and is not a socket; remove it or choose another --socket")
        if _answers(path):
            raise StartupError(f"another relayd is already listening on {path}; stop it or choose another --socket")
        os.unlink(path)  # left behind by a daemon that died
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    old_umask = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot bind {path}: {exc.strerror}") from None
    finally:
        os.umask(old_umask)
    sock.listen(512)
    return sock


def socket_file_id(path: str) -> tuple[int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def remove_socket(path: str, file_id: tuple[int, int] | None) -> None:
    """Unlink our socket file, unless another daemon has replaced it meanwhile."""
    if file_id is not None and socket_file_id(path) == file_id:
        try:
            os.unlink(path)
        except OSError:
            pass


# -- systemd -------------------------------------------------------------------------------


class Systemd:
    """sd_notify over `$NOTIFY_SOCKET`; silent when not run by systemd."""

    def __init__(self) -> None:
        address = os.environ.get("NOTIFY_SOCKET")
        if address and address.startswith("@"):
            address = "\0" + address[1:]
        self.address = address
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        self.watchdog_seconds = int(usec) / 1e6 if usec and usec.isdigit() and (not pid or pid == str(os.getpid())) else None

    def notify(self, state: str) -> None:
        if not self.address:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(self.address)
                sock.sendall(state.encode())
        except OSError as exc:
            structlog.get_logger().warning("sd_notify failed", state=state, error=str(exc))


# -- logging -------------------------------------------------------------------------------


def configure_logging(level: str) -> None:
    """JSON lines on stderr; readable text when stderr is a terminal."""
    renderer = structlog.dev.ConsoleRenderer() if sys.stderr.isatty() else structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
