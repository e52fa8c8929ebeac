"""Reading an inbox as it grows: the complete lines appended since the last look.

`InboxTail` keeps a byte offset into `inbox.jsonl` and follows it across rotations (the
rest of the renamed file is read, then the new file from its start). It reads the file
directly, whichever process wrote it, so it serves followers in daemon and direct mode
alike; what wakes a follower up is `relayd.watch`.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import msgspec

from . import layout

_READ_CHUNK = 256 * 1024
_MAX_LINE = 16 << 20  # a 256 KiB body stays far below this even with every character escaped
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class InboxTail:
    """New complete messages of one inbox since the last `drain`, oldest first."""

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

    def _read(self, add: Callable[[dict[str, Any]], None]) -> None:
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
                    _decode(line, add)
            self.offset += end + 1
            size = _READ_CHUNK

    def drain(self, add: Callable[[dict[str, Any]], None]) -> None:
        """Pass each message appended since the last call to `add`, the oldest first."""
        if self.fd >= 0:
            self._read(add)
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
                    self._read(add)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _decode(line: bytes, add: Callable[[dict[str, Any]], None]) -> None:
    try:
        message = msgspec.json.decode(line)
    except msgspec.DecodeError:
        return  # a corrupt line is `read`'s to report; a follower only passes messages on
    if isinstance(message, dict) and "id" in message:
        add(message)
