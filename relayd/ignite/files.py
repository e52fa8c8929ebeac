"""The queue directory's files: listing, moving without replacing, and cleaning up.

No relay concepts here, only the filesystem rules the queue monitor relies on: a move
never replaces a file (link + unlink), directories are fsynced after a change, symlinks
and dot files are never taken for messages, and a file still open for writing is not
taken (IGNITE's tools create a message file in place, then write it).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import stat

from relayd.errors import RelayError

PROCESSED = "processed"
DEAD_LETTER = "dead_letter"
MALFORMED = "malformed"
TEMP = re.compile(r"^\..+\.(\d+)\.[0-9a-f]{8}\.tmp$")  # mime.write_atomic's: .{name}.{pid}.{random}.tmp


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def lstat_mode(path: str) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def mime_files(folder: str) -> list[str]:
    """Regular `*.mime` files (no dot names, no symlinks), oldest name first."""
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RelayError(f"cannot read {folder}: {exc.strerror or exc}") from None
    return [name for name in names if name.endswith(".mime") and not name.startswith(".") and stat.S_ISREG(lstat_mode(os.path.join(folder, name)))]


def being_written(path: str) -> bool | None:
    """Whether some process has `path` open for writing: True, False, or None when this
    filesystem cannot tell (then the caller waits for the file to be quiet instead).

    The kernel refuses a read lease on a file open for writing anywhere (EAGAIN), which
    is exactly "its writer is not done". The lease is released at once; a writer that
    opens the file in that instant waits microseconds, and its lease-break signal is
    SIGURG, which is ignored (the default, SIGIO, would kill this process).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    try:
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as exc:
        return True if exc.errno == errno.EAGAIN else None  # EACCES (not ours), EINVAL (no leases here)
    else:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return False
    finally:
        os.close(fd)


def mkdir(path: str) -> None:
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise RelayError(f"cannot create {path}: {exc.strerror or exc}") from None


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def move(source: str, folder: str, name: str) -> str | None:
    """Move `source` into `folder` without ever replacing a file there: link, then unlink.

    A crash between the two leaves both names on one inode; the next attempt sees the
    same inode at the target and only removes the source. A different file of the same
    name gets `_1`, `_2`, ... (IGNITE's own collision rule). None when `source` is gone.
    """
    stem = name[: -len(".mime")] if name.endswith(".mime") else name
    candidate, n = name, 0
    while True:
        target = os.path.join(folder, candidate)
        try:
            os.link(source, target, follow_symlinks=False)
            break
        except FileExistsError:
            try:
                if os.lstat(source).st_ino == os.lstat(target).st_ino:
                    break  # an earlier move got this far
            except FileNotFoundError:
                return None if not os.path.lexists(source) else target
            n += 1
            candidate = f"{stem}_{n}.mime"
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise RelayError(f"{source} and {folder} are on different filesystems") from None
            raise RelayError(f"cannot move {source} to {folder}: {exc.strerror or exc}") from None
    try:
        fsync_dir(folder)
        os.unlink(source)
        fsync_dir(os.path.dirname(source))
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise RelayError(f"cannot move {source} to {folder}: {exc.strerror or exc}") from None
    return target


def sweep_temp_files(folders: list[str]) -> None:
    """Temp files of an interrupted write (their writer is dead, the rename never came) are litter."""
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            match = TEMP.match(name)
            if match and not running(int(match.group(1))):  # a live writer is still at it
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
