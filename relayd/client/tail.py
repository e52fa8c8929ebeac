"""Reading an inbox as it grows: the complete lines appended since the last look.

`InboxTail` keeps a byte offset into `inbox.jsonl` and follows it across rotations (the
rest of the renamed file is read, then the new file from its start). It reads the file
directly, whichever process wrote it, so it serves followers in daemon and direct mode
alike; what wakes a follower up is `relayd.client.watch`.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import msgspec

from .. import layout
from ..fsio import complete_end, complete_lines

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
        # At the end of the complete lines: a line still being written is new when it is done.
        self.offset = complete_end(self.fd) if at_end else 0

    def _read(self, add: Callable[[dict[str, Any]], None]) -> None:
        for end, line in complete_lines(self.fd, self.offset):
            self.offset = end
            if line:
                _decode(line, add)

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
