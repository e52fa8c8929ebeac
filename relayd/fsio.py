"""Crash-safe file primitives, all relative to an open directory and never following symlinks.

Every path inside the store is reached with `openat(dir_fd, name, O_NOFOLLOW)` from the
store root, so a symlink planted anywhere in the store is refused, not followed.
The rules (DESIGN §2): an append is one `write()` under an exclusive flock, after cutting
back a torn tail; a short write is rolled back and reported; data is fsynced before an
operation reports success (through a `Syncer`, which the daemon swaps for group commit);
new files fsync their directory; replaced files go through temp + fsync + rename.

The store's line files (inboxes, events.jsonl, delivery.jsonl, the bridge's files) are
appended to with `append_lines`, opened (created, rotated) by `open_appending`, and read
with the line readers at the end of this module, forward (`complete_lines`) and backward
(`lines_backward`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import pwd
TYPE_CHECKING = False  # typing costs ~2 ms of start-up: the commit guard and relayctl load this module
if TYPE_CHECKING:
    from typing import Callable, Iterator

from .errors import StoreError, UnsafePath
from .ulid import new_ulid

FILE_MODE = 0o600
DIR_MODE = 0o700
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
# Files are opened non-blocking so a FIFO planted where a store file belongs cannot make the
# opener (the daemon's only thread) wait for a peer that never comes; for a regular file
# the flag changes nothing.
_FILE_FLAGS = _NOFOLLOW | os.O_NONBLOCK
# What every NDJSON reader reads at a time. One rule for a line longer than that: it is
# never split or cut, the read grows (doubling) until it holds the whole line. Relay's
# longest lines are messages (a body is capped at 256 KiB, under 2 MiB however escaped),
# so only a hand-made file makes a read larger than that.
LINE_CHUNK = 256 * 1024
_RECORD_READ = 64 * 1024  # a record file shorter than this is read in one call


class Syncer:
    """Makes written data durable. Direct mode fsyncs at once."""

    def file(self, fd: int) -> None:
        fsync_now(fd)

    def dir(self, fd: int) -> None:
        fsync_now(fd)

    def content(self, fd: int) -> None:
        """A new file's content, before its name appears (Dir.replace, create_exclusive):
        durable at once even where `file` waits for a later round (relayd's group commit).
        Renamed over the old file first and fsynced after, a crash in between could leave
        the name empty, the old content gone with it (DESIGN §2: fsync, then rename)."""
        self.file(fd)


class NoSync(Syncer):
    """`--no-fsync` / RELAY_FSYNC=0: for bulk imports and benchmarks, not for real mail."""

    def file(self, fd: int) -> None:
        pass

    def dir(self, fd: int) -> None:
        pass


def fsync_now(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:  # never retried into success: the page cache may have dropped the data
        raise StoreError(f"fsync failed: {exc.strerror}") from exc


def unreadable_store(path: str) -> StoreError:
    """The store's own directory refuses this user (another user's store, or mode 000):
    said as such, not as the first thing that happened to fail inside it."""
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = f"uid {os.geteuid()}"
    return StoreError(f"the store at {path} is not readable by you ({user}): permission denied; use a store of your own (--dir or RELAY_DIR) or ask its owner")


def _os_error(exc: OSError, what: str) -> Exception:
    if exc.errno == errno.ELOOP or exc.errno == errno.ENOTDIR:
        return UnsafePath(f"{what} is a symlink or not a regular store entry; relay does not follow it")
    if exc.errno == errno.ENOSPC:
        return StoreError(f"{what}: no space left on device")
    return StoreError(f"{what}: {exc.strerror or exc}")


class Dir:
    """An open directory of the store. Closing is the owner's job (use `with`)."""

    __slots__ = ("fd", "path")

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path

    # -- opening -------------------------------------------------------------------
    @classmethod
    def open_root(cls, path: str, create: bool = False) -> "Dir":
        """The store root itself may be a symlink the user chose; nothing inside it may."""
        if create:
            try:
                os.makedirs(path, mode=DIR_MODE, exist_ok=True)
            except OSError as exc:  # e.g. under /proc, or below a file
                raise StoreError(f"cannot create the store at {path}: {exc.strerror or exc}") from None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise
        except PermissionError:
            raise unreadable_store(path) from None
        except OSError as exc:
            raise _os_error(exc, path) from exc
        return cls(fd, path)

    def subdir(self, name: str, create: bool = False, sync: Syncer | None = None) -> "Dir":
        path = os.path.join(self.path, name)
        if create:
            try:
                os.mkdir(name, DIR_MODE, dir_fd=self.fd)
                if sync is not None:
                    sync.dir(self.fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise _os_error(exc, path) from exc
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=self.fd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _os_error(exc, path) from exc
        return Dir(fd, path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "Dir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- files ---------------------------------------------------------------------
    def open(self, name: str, flags: int, mode: int = FILE_MODE) -> int:
        """A regular file of the store, never a symlink, FIFO, device or directory, and
        never one with a second hard link (writing to it would change a file outside the store)."""
        return self._open_checked(name, flags, mode)[0]

    def _open_checked(self, name: str, flags: int, mode: int = FILE_MODE, writing: bool | None = None) -> tuple[int, os.stat_result]:
        """`writing` (default: whether `flags` open it to write) refuses a second hard link."""
        try:
            fd = os.open(name, flags | _FILE_FLAGS, mode, dir_fd=self.fd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _os_error(exc, os.path.join(self.path, name)) from exc
        try:
            # The link count matters only for writing (a reader may also meet a name that
            # create_exclusive has just linked and not yet unlinked its temp name from).
            if writing is None:
                writing = bool(flags & (os.O_WRONLY | os.O_RDWR))
            info = check_regular(fd, self.path, name, writing=writing)
        except BaseException:
            os.close(fd)
            raise
        return fd, info

    def open_reading(self, name: str) -> tuple[int, int]:
        """(descriptor, inode) of a file opened to read, or (-1, -1) when it does not exist.
        A reader compares the inode with the one it noted last time, to tell the file it
        read from one that has replaced it (a rotation)."""
        try:
            fd, info = self._open_checked(name, os.O_RDONLY)
        except FileNotFoundError:
            return -1, -1
        return fd, info.st_ino

    def inode(self, name: str) -> int:
        """The inode of `name` (a symlink's own), -1 when it does not exist."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_ino
        except FileNotFoundError:
            return -1

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            return True
        except FileNotFoundError:
            return False

    def refuse_non_regular(self, *names: str) -> None:
        """Raise UnsafePath when one of `names` exists and is not a plain file (a planted
        symlink): checked before writing, so an operation is refused rather than half done."""
        for name in names:
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePath(f"{os.path.join(self.path, name)} is a symlink or not a regular file; relay does not follow it")

    def read_bytes(self, name: str) -> bytes | None:
        """The whole file, or None when it does not exist."""
        try:
            fd, info = self._open_checked(name, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            # One read when the size is known (a regular file reads short only at its end):
            # listing 1000 reservations reads 1000 files.
            chunks = [os.read(fd, info.st_size + 1)]
            if len(chunks[0]) > info.st_size:
                while chunk := os.read(fd, 1 << 20):  # it grew meanwhile
                    chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_listed(self, suffix: str) -> list[tuple[str, bytes]]:
        """(name, contents) of every non-empty plain file named `*suffix` here, by name;
        temp files (dot names) and anything else -- a planted symlink, FIFO or directory,
        a file removed meanwhile -- are skipped.

        For folders of many small records (1000 reservations): the listing's file types
        stand in for an fstat per file, and one read takes a whole record."""
        with os.scandir(self.fd) as listing:
            names = sorted(entry.name for entry in listing if entry.name.endswith(suffix) and not entry.name.startswith(".") and entry.is_file(follow_symlinks=False))
        found = []
        for name in names:
            try:
                fd = os.open(name, os.O_RDONLY | _FILE_FLAGS | os.O_CLOEXEC, dir_fd=self.fd)
            except OSError:
                continue  # gone, or replaced by a symlink since the listing
            try:
                raw = os.read(fd, _RECORD_READ)
                if len(raw) == _RECORD_READ:  # a big one: the rest
                    chunks = [raw]
                    while chunk := os.read(fd, 1 << 20):
                        chunks.append(chunk)
                    raw = b"".join(chunks)
            except OSError:
                continue  # not a plain file after all (a FIFO reads EAGAIN, a directory EISDIR)
            finally:
                os.close(fd)
            if raw:
                found.append((name, raw))
        return found

    def replace(self, name: str, data: bytes, sync: Syncer | None, mtime: float | None = None, mode: int | None = None) -> None:
        """Atomically replace `name`: temp file, fsync, rename, fsync the directory.

        `sync=None` skips the fsyncs (heartbeats: losing one costs nothing). `mtime` sets
        the file's modification time before it appears (delivery records keep their due
        time there, so a sweep can skip records that are not due without reading them).
        `mode` sets its permissions (default FILE_MODE; files outside the store keep theirs).
        """
        tmp = f".{name}.{new_ulid()}.tmp"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            _write_all(fd, data, os.path.join(self.path, name))
            if mtime is not None:
                os.utime(fd, (mtime, mtime))
            if mode is not None:
                os.fchmod(fd, mode)
            if sync is not None:
                sync.content(fd)
        except BaseException:
            os.close(fd)
            self.unlink(tmp, missing_ok=True)
            raise
        os.close(fd)
        try:
            os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError as exc:
            self.unlink(tmp, missing_ok=True)
            raise _os_error(exc, os.path.join(self.path, name)) from exc
        if sync is not None:
            sync.dir(self.fd)

    def create_exclusive(self, name: str, data: bytes, sync: Syncer | None) -> bool:
        """Create `name` with `data` only if it does not exist (O_CREAT|O_EXCL).

        The content is written to a temp file first and hard-linked into place, so no
        reader ever sees the name with partial content. False when the name was taken.
        """
        tmp = f".{name}.{new_ulid()}.tmp"
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            _write_all(fd, data, os.path.join(self.path, name))
            if sync is not None:
                sync.content(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError as exc:
            raise _os_error(exc, os.path.join(self.path, name)) from exc
        finally:
            self.unlink(tmp, missing_ok=True)
        if sync is not None:
            sync.dir(self.fd)
        return True

    def unlink(self, name: str, missing_ok: bool = False) -> bool:
        try:
            os.unlink(name, dir_fd=self.fd)
            return True
        except FileNotFoundError:
            if missing_ok:
                return False
            raise
        except OSError as exc:
            raise _os_error(exc, os.path.join(self.path, name)) from exc

    def rename(self, src: str, dst: str) -> None:
        try:
            os.rename(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise _os_error(exc, os.path.join(self.path, src)) from exc

    def listdir(self) -> list[str]:
        try:
            return os.listdir(self.fd)
        except OSError as exc:
            raise _os_error(exc, self.path) from exc

    def locked(self, lock_name: str, shared: bool = False) -> "Flock":
        """`with dir.locked(name):` holds flock on the sidecar lock file `lock_name`
        (created on first use) for the block."""
        return Flock(self, lock_name, shared)


class Flock:
    """The `with` block of Dir.locked. A class rather than contextlib.contextmanager:
    contextlib's imports (collections, functools) cost the pre-commit guard, which loads
    this module, more start-up than its whole index lookup."""

    __slots__ = ("_dir", "_name", "_shared", "_fd")

    def __init__(self, folder: Dir, lock_name: str, shared: bool) -> None:
        self._dir, self._name, self._shared, self._fd = folder, lock_name, shared, -1

    def __enter__(self) -> None:
        # Read-only: flock needs no more, and a descriptor opened to write would tell every
        # inotify watcher of the folder "written" (IN_CLOSE_WRITE) each time a lock is let
        # go. A watcher that wakes on that and reads under the lock never sleeps again.
        # NFS emulates flock with fcntl locks, whose exclusive kind needs a descriptor open
        # to write (EBADF otherwise): there the lock file is opened to write after all.
        for access in (os.O_RDONLY, os.O_RDWR):
            # Checked as a file written to: one linked to a file outside the store would
            # lock that file for whoever else uses it.
            fd = self._dir._open_checked(self._name, access | os.O_CREAT, writing=True)[0]
            try:
                fcntl.flock(fd, fcntl.LOCK_SH if self._shared else fcntl.LOCK_EX)
            except OSError as exc:
                os.close(fd)
                if exc.errno == errno.EBADF and access == os.O_RDONLY:
                    continue
                raise _os_error(exc, os.path.join(self._dir.path, self._name)) from exc
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            return

    def __exit__(self, *exc: object) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)  # closing releases the lock


def replace_file(path: str, data: bytes) -> None:
    """Atomically replace a file outside the store (a program's settings, a systemd unit)
    by its path, as Dir.replace does inside the store: a crash leaves the old file or the
    new one, never part of one. It keeps the old file's permissions; a new one gets what
    the umask allows. OSError, or StoreError/UnsafePath as from Dir.replace."""
    folder, name = os.path.split(os.path.abspath(path))
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    with Dir(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), folder) as where:
        where.replace(name, data, Syncer(), mode=mode)


def check_regular(fd: int, folder: str, name: str, writing: bool = True) -> os.stat_result:
    """Refuse an open store file (`folder`/`name`) that is not a plain file, or (to write)
    not singly linked. Its path is made only for the error: every append opens files."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePath(f"{os.path.join(folder, name)} is not a regular file; relay does not use it")
    if writing and info.st_nlink > 1:
        raise UnsafePath(f"{os.path.join(folder, name)} has {info.st_nlink} hard links; relay does not write to a file shared with another path")
    return info


def _write_all(fd: int, data: bytes, what: str) -> None:
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except OSError as exc:
        raise _os_error(exc, what) from exc


def repair_tail(fd: int, size: int) -> int:
    """Cut a torn last line (no trailing newline) back to the last complete line.

    Returns the new size. A crash can leave half a line; the next append must not glue
    its record onto it.
    """
    keep = complete_end(fd, size)
    if keep != size:
        os.ftruncate(fd, keep)
    return keep


def append_lines(fd: int, payload: bytes, what: str, size: int | None = None) -> int:
    """Append `payload` (whole lines) in one write to an fd opened O_RDWR|O_APPEND, under
    the caller's lock. Repairs a torn tail first; rolls a short write back. `size`: the
    file's size as the caller just read it under that lock (`open_appending`), if it did.

    Returns the offset at which the payload starts.
    """
    size = repair_tail(fd, os.fstat(fd).st_size if size is None else size)
    try:
        written = os.write(fd, payload)
    except OSError as exc:
        os.ftruncate(fd, size)
        raise _os_error(exc, what) from exc
    if written != len(payload):
        # Usually a full disk or a file size limit; everything is rolled back either way.
        # Which one: the free space right now says a full disk (writing the rest would not
        # always: another writer rolling back its own short write may free some meanwhile),
        # else the error of writing the rest says why.
        why = "short write"
        try:
            free = os.fstatvfs(fd)
            if free.f_bavail * free.f_frsize < len(payload) - written:
                why = "no space left on device"
            else:
                os.write(fd, payload[written:])
        except OSError as exc:
            why = str(_os_error(exc, what)).removeprefix(f"{what}: ")
        os.ftruncate(fd, size)
        raise StoreError(f"{what}: {why} ({written} of {len(payload)} bytes written, rolled back)")
    return size


def open_appending(folder: Dir, name: str, adding: int, sync: Syncer, rotate_bytes: int | None = None, rotate: Callable[[int], None] | None = None) -> tuple[int, int]:
    """(fd, size) of the line file `folder/name` (created when absent) to append `adding`
    bytes to, under the caller's lock. When the file holds something and the append would
    take it past `rotate_bytes`, `rotate(size)` first moves it away (renames it), and a new
    file is made. A file made here has its directory fsynced (DESIGN §2): the data fsynced
    into it later must not be lost with its name. The fd is the caller's to close."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
    fd, info = folder._open_checked(name, flags)
    try:
        size = info.st_size
        if rotate is not None and rotate_bytes is not None and size and size + adding > rotate_bytes:
            os.close(fd)
            fd = -1
            rotate(size)
            fd, info = folder._open_checked(name, flags)
            size = info.st_size
        if size == 0:
            sync.dir(folder.fd)  # the file may have just been created (or the old one renamed away)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return fd, size


def append_file(folder: Dir, name: str, payload: bytes, sync: Syncer, *, durable: bool = True, rotate_bytes: int | None = None, rotate: Callable[[int], None] | None = None) -> None:
    """Append whole lines to `folder/name` in one write, under the caller's lock: opened (and
    rotated) by `open_appending`, fsynced unless not `durable`, closed."""
    fd, size = open_appending(folder, name, len(payload), sync, rotate_bytes, rotate)
    try:
        append_lines(fd, payload, os.path.join(folder.path, name), size)
        if durable:
            sync.file(fd)
    finally:
        os.close(fd)


# -- reading NDJSON files ------------------------------------------------------------
# Every reader of the store's line files (inboxes, events.jsonl, delivery.jsonl, the bridge's
# files) goes through these. Readers take complete lines only: a tail without its newline
# is a write in progress (or torn by a crash, and cut back by the next append), not a line.


def complete_end(fd: int, size: int | None = None) -> int:
    """The offset just past the last newline before `size` (the file's size by default):
    where the complete lines end. Reads back from the end only as far as that newline."""
    end = os.fstat(fd).st_size if size is None else size
    if end == 0 or os.pread(fd, 1, end - 1) == b"\n":
        return end
    while end > 0:
        start = max(0, end - LINE_CHUNK)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def line_start_at(fd: int, offset: int) -> int:
    """`offset` if a line starts there, else the start of the line after it (a cursor
    that points into a line); the file's size when no line starts at or after it."""
    if offset <= 0:
        return 0
    if os.pread(fd, 1, offset - 1) == b"\n":
        return offset
    size = os.fstat(fd).st_size
    while offset < size:
        chunk = os.pread(fd, LINE_CHUNK, offset)
        if not chunk:
            break
        newline = chunk.find(b"\n")
        if newline >= 0:
            return offset + newline + 1
        offset += len(chunk)
    return max(offset, size)


def blocks_forward(fd: int, start: int, end: int | None = None, chunk: int = LINE_CHUNK) -> Iterator[tuple[int, bytes]]:
    """(offset, block) from `start` (a line start) up to `end`: each block is whole lines,
    newline included, about `chunk` bytes. For readers that look at many lines at once
    (counting them, searching their bytes); `complete_lines` gives them one by one."""
    offset = start
    want = chunk
    while end is None or offset < end:
        size = want if end is None else min(want, end - offset)
        data = os.pread(fd, size, offset)
        last = data.rfind(b"\n") + 1
        if last == 0:
            if len(data) < size:
                return  # nothing more, or an unfinished line
            want *= 2  # one line longer than the chunk: read it whole
            continue
        want = chunk
        yield offset, data if last == len(data) else data[:last]
        offset += last


def complete_lines(fd: int, start: int, end: int | None = None, chunk: int = LINE_CHUNK) -> Iterator[tuple[int, bytes]]:
    """(end offset, line) for each complete line of `fd` from `start` (up to `end`), the
    first first; empty lines too. A line begins where the one before it ended (or at `start`)."""
    for offset, block in blocks_forward(fd, start, end, chunk):
        lines = block.split(b"\n")
        lines.pop()  # (the block ends in a newline: nothing after it)
        position = offset
        for line in lines:
            position += len(line) + 1
            yield position, line


def regions_backward(fd: int, stop: int, first: int = LINE_CHUNK // 4, most: int = LINE_CHUNK) -> Iterator[tuple[int, bytes, int]]:
    """`fd`'s bytes before `stop` (a line boundary), the last region first, as (offset,
    data, begin): `data` was read at `offset`, and the region is `data[begin:]` -- whole
    lines, no line split between two regions (given so, a large block needs no copy).

    A backward read mostly wants only the newest lines (the last few messages, a fresh
    id), so the first region is `first` bytes and each next one four times larger, up to
    `most`; a line longer than a region makes that region longer."""
    base = size = first
    while stop > 0:
        start = max(0, stop - size)
        data = os.pread(fd, stop - start, start)
        begin = 0
        if start > 0:
            begin = data.find(b"\n") + 1  # the first line may begin before `start`
            if begin == 0 or begin == len(data):  # one line longer than the region: read further back
                size *= 2
                continue
        yield start, data, begin
        stop = start + begin
        base = size = min(base * 4, most)


def lines_backward(fd: int, first: int = LINE_CHUNK // 4, most: int = LINE_CHUNK) -> Iterator[tuple[int, bytes]]:
    """(end offset, line) for each non-empty complete line of `fd`, the last first."""
    for offset, data, begin in regions_backward(fd, complete_end(fd), first, most):
        end = offset + len(data)
        lines = data[begin:].split(b"\n")
        lines.pop()
        for line in reversed(lines):
            if line:
                yield end, line
            end -= len(line) + 1


def regions_holding(fd: int, needle: bytes, first: int = LINE_CHUNK // 4, most: int = LINE_CHUNK) -> Iterator[tuple[bytes, list[tuple[int, bytes]]]]:
    """A byte search from the end: each region of `fd`'s complete lines, the last first,
    with its lines that hold `needle` as (end offset, line), the last first. Only a region
    holding the needle is split into lines, so a scan costs about a byte search."""
    for offset, data, begin in regions_backward(fd, complete_end(fd), first, most):
        region = data[begin:]
        hits = []
        if needle in region:
            end = offset + len(data)
            lines = region.split(b"\n")
            lines.pop()
            for line in reversed(lines):
                if needle in line:
                    hits.append((end, line))
                end -= len(line) + 1
        yield region, hits
