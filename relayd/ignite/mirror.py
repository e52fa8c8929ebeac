"""Relay mail to a queue agent, also written into its queue as files.

An IGNITE agent that only reads files still gets what relay agents send it: each new
message in the inbox of an agent with a queue directory becomes
`<agent>/processed/{type}_{16-digit usec}.mime`, marked `delivered` (relay announced it
already, so the monitor sends no second notice). The file name comes from the message id,
so writing a message twice (after a crash) finds the file and writes nothing; how far
each inbox has been read survives restarts in `<queue>/.relay-mirror.json`. Relay's own
notices about queue files (tagged `ignite:`) are never written back.
"""

from __future__ import annotations

import json
import os
import re
from typing import Callable

from relayd.errors import RelayError
from relayd.client.tail import InboxTail
from relayd.ulid import is_ulid, ulid_time_ms

from ..layout import sha256_hex
from . import convert, mime
from .files import DEAD_LETTER, PROCESSED

STATE = ".relay-mirror.json"
TAG = "ignite:"  # relay's notices about queue files (relayd.ignite.queue)
STATUS, PROCESSED_AT, NOTICE = mime.PREFIX + "Status", mime.PREFIX + "Processed-At", "X-Relay-Notice"


class Mirror:
    def __init__(self, root: str, inbox_dir: Callable[[str], str], clock: Callable[[], float], log: Callable[..., None]) -> None:
        self.root = root
        self.inbox_dir = inbox_dir  # agent -> its directory in the store
        self.clock = clock
        self.log = log
        self._tails: dict[str, InboxTail] = {}
        self._state: dict | None = None

    def directories(self, agents: list[str]) -> list[str]:
        """The inbox directories to watch for new mail."""
        return [self.inbox_dir(agent) for agent in agents if os.path.isdir(self.inbox_dir(agent))]

    def pass_for(self, agent: str) -> list[str]:
        """Write the agent's new relay mail into its queue; returns the files written."""
        written: list[str] = []
        tail = self._tails.get(agent)
        if tail is None:
            tail = self._tails[agent] = self._open_tail(agent)
        new: list[dict] = []
        tail.drain(new.append)
        for message in new:
            if message.get("to") != agent or any(str(tag).startswith(TAG) for tag in message.get("tags") or ()):
                continue
            try:
                path = self._write(agent, message)
            except RelayError as exc:
                self.log("queue_mirror_failed", agent=agent, message_id=message.get("id"), error=exc.message)
                continue
            if path:
                written.append(path)
        return written

    def _open_tail(self, agent: str) -> InboxTail:
        """Resume where the last run stopped (same inbox file); a first run starts at the end."""
        saved = self._load().get(agent) or {}
        tail = InboxTail(self.inbox_dir(agent), start_at_end=True)
        if tail.fd >= 0 and saved.get("ino") == os.fstat(tail.fd).st_ino and 0 <= saved.get("offset", -1) <= os.fstat(tail.fd).st_size:
            tail.offset = saved["offset"]
        elif tail.fd >= 0 and saved:
            tail.offset = 0  # rotated while nobody watched: the new file from its start
        return tail

    def _write(self, agent: str, message: dict) -> str | None:
        kind = message.get("type") or convert.UNTYPED
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", kind):
            kind = convert.UNTYPED
        # The name comes from the message id (its ULID time, plus a stable tail), so a
        # restart that mirrors the same message again finds the file and writes nothing.
        if not is_ulid(str(message.get("id"))):
            return None
        digest = int(sha256_hex(message["id"].encode()), 16)
        usec = ulid_time_ms(message["id"]) * 1000 + digest % 1000
        name = f"{kind}_{usec:016d}.mime"
        folder = os.path.join(self.root, agent)
        if any(os.path.lexists(os.path.join(folder, sub, name)) for sub in ("", PROCESSED, os.path.join("..", DEAD_LETTER))):
            return None
        file = convert.from_message(message)
        file.set(STATUS, "delivered")
        file.set(PROCESSED_AT, mime.iso_seconds(self.clock()))
        file.set(NOTICE, message["id"])
        target = os.path.join(folder, PROCESSED, name)
        mime.write_atomic(target, file, exclusive=True)
        self.log("queue_mirrored", file=target, agent=agent, message_id=message["id"])
        return target

    def _load(self) -> dict:
        if self._state is None:
            try:
                with open(os.path.join(self.root, STATE), "rb") as handle:
                    loaded = json.loads(handle.read() or b"{}")
            except (OSError, ValueError):
                loaded = {}
            self._state = loaded if isinstance(loaded, dict) else {}
        return self._state

    def save(self) -> None:
        """Record how far each inbox was written out (only when that changed)."""
        # An inbox not created yet is recorded as inode 0: when it appears, it is read from its start.
        state = {agent: {"ino": os.fstat(tail.fd).st_ino if tail.fd >= 0 else 0, "offset": tail.offset if tail.fd >= 0 else 0} for agent, tail in self._tails.items()}
        if state != self._load():
            mime.write_atomic(os.path.join(self.root, STATE), json.dumps(state) + "\n")
            self._state = state

    def close(self) -> None:
        for tail in self._tails.values():
            tail.close()
        self._tails.clear()

